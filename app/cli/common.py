"""What the commands share: the one-line failure, the database check made before a server
starts in this process, and how a client reads OpenCode's events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.settings import Settings


# A client driving sessions cannot answer questions: a turn that would ask one is told no at once.
NON_INTERACTIVE_RULES = [{"permission": "question", "pattern": "*", "action": "deny"}]


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


def event_session(properties: dict[str, Any]) -> str | None:
    """The session an event belongs to, wherever its payload names it."""
    for holder in (properties, properties.get("info"), properties.get("part")):
        if isinstance(holder, dict) and isinstance(holder.get("sessionID"), str):
            return str(holder["sessionID"])
    return None


def error_text(error: dict[str, Any]) -> str:
    """The message of an OpenCode error object (a session's or a message's ``error``)."""
    data = error.get("data")
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(error.get("name", "unknown error"))
