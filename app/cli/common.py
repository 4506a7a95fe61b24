"""What the commands share: the one-line failure and the database check made before a server
starts in this process."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings


class CliError(Exception):
    """A failure the command reports as one line on stderr (exit status 1)."""


def check_database(settings: Settings, *, busy_hint: str = "") -> None:
    """Refuse early, in one line, a database that cannot be opened (SQLite serves one process per
    file, so a server already running on it is the usual case)."""
    import asyncio

    from app.store.database import DatabaseUnavailable, UnsupportedDatabase, open_database

    try:
        asyncio.run(open_database(settings.database_url).check())
    except DatabaseUnavailable as exc:
        raise CliError(f"{exc}{busy_hint}") from None
    except UnsupportedDatabase as exc:
        raise CliError(str(exc)) from None
