"""The ``project_places`` table: each directory's project as a process whose machine has the
directory resolved it. Processes on machines that lack a directory (they do not share the
project directories) read it here instead of calling the project ``global``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.store import sql
from app.store.database import Reader, Row, WriteScope


@dataclass(frozen=True)
class Place:
    """A directory's project: the id (its repository's root commit, or ``global``), the worktree
    shown for it, ``git`` or None, and when the directory was created (ms)."""

    project_id: str
    worktree: str
    vcs: str | None
    created: int

    def same_project(self, other: Place | None) -> bool:
        """Whether ``other`` records this project (its ``created`` may have moved: a directory's
        ctime does)."""
        return other is not None and replace(other, created=self.created) == self


def _place(row: Row) -> Place:
    return Place(row[1], row[2], row[3], int(row[4]))


async def place(reader: Reader, directory: str) -> Place | None:
    rows = await reader.fetch(sql.PROJECT_PLACE, {"directory": directory})
    return _place(rows[0]) if rows else None


async def every_place(reader: Reader) -> dict[str, Place]:
    return {str(row[0]): _place(row) for row in await reader.fetch(sql.ALL_PROJECT_PLACES)}


def record(scope: WriteScope, directory: str, found: Place) -> None:
    scope.execute(
        sql.UPSERT_PROJECT_PLACE,
        {
            "directory": directory,
            "project_id": found.project_id,
            "worktree": found.worktree,
            "vcs": found.vcs,
            "created": found.created,
        },
    )
