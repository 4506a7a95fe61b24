"""The ``projects`` table: what clients set on a project (name, icon, commands), by project id.
The projects themselves are found on disk and from the sessions' directories."""

from __future__ import annotations

from typing import Any

from app.jsonutil import dumps, loads
from app.store import sql
from app.store.database import Reader, WriteScope

Settings = tuple[dict[str, Any], int]  # what clients set, and when it was last updated (ms)


async def settings(reader: Reader, project_id: str) -> Settings | None:
    rows = await reader.fetch(sql.PROJECT, {"id": project_id})
    return (loads(rows[0][0]), int(rows[0][1])) if rows else None


async def settings_to_change(scope: WriteScope, project_id: str) -> Settings | None:
    """``settings``, held (``WriteScope.hold``) until the transaction saves the changed ones."""
    await scope.hold(project_id)
    return await settings(scope, project_id)


async def every_settings(reader: Reader) -> dict[str, Settings]:
    return {row[0]: (loads(row[1]), int(row[2])) for row in await reader.fetch(sql.ALL_PROJECTS)}


def save_settings(scope: WriteScope, project_id: str, info: dict[str, Any], time_updated: int) -> None:
    scope.execute(sql.UPSERT_PROJECT, {"id": project_id, "info": dumps(info), "time_updated": time_updated})
