"""The ``saved_permissions`` table: the ``always`` answers to permission requests, per project."""

from __future__ import annotations

from dataclasses import dataclass

from app.store import sql
from app.store.database import Reader, Row, WriteScope


@dataclass(frozen=True, slots=True)
class SavedPermission:
    id: str
    project_id: str
    permission: str
    pattern: str
    time_created: int


def _saved(row: Row) -> SavedPermission:
    return SavedPermission(row[0], row[1], row[2], row[3], int(row[4]))


async def of_project(reader: Reader, project_id: str) -> list[SavedPermission]:
    """The project's saved answers, oldest first."""
    return [_saved(row) for row in await reader.fetch(sql.SAVED_PERMISSIONS, {"project_id": project_id})]


async def every(reader: Reader) -> list[SavedPermission]:
    """Every project's saved answers, oldest first."""
    return [_saved(row) for row in await reader.fetch(sql.ALL_SAVED_PERMISSIONS)]


def save(scope: WriteScope, saved: SavedPermission) -> None:
    scope.execute(
        sql.INSERT_SAVED_PERMISSION,
        {
            "id": saved.id,
            "project_id": saved.project_id,
            "permission": saved.permission,
            "pattern": saved.pattern,
            "time_created": saved.time_created,
        },
    )


def forget(scope: WriteScope, saved_id: str) -> None:
    scope.execute(sql.DELETE_SAVED_PERMISSION, {"id": saved_id})
