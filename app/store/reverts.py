"""The ``reverts`` table: the journal of each revert or unrevert under way, as the history domain
encodes it (``app/runtime/history/_journal.py`` says when it is written and dropped)."""

from __future__ import annotations

from app.store import sql
from app.store.database import Reader, WriteScope


async def journal(reader: Reader, session_id: str) -> str | None:
    rows = await reader.fetch(sql.REVERT, {"session_id": session_id})
    return str(rows[0][0]) if rows else None


async def under_way(reader: Reader) -> list[str]:
    """The sessions with a journal."""
    return [row[0] for row in await reader.fetch(sql.REVERTS_UNDER_WAY)]


def save(scope: WriteScope, session_id: str, journal: str) -> None:
    scope.execute(sql.SAVE_REVERT, {"session_id": session_id, "journal": journal})


def drop(scope: WriteScope, session_id: str) -> None:
    scope.execute(sql.DELETE_SESSION_ROWS["reverts"], {"session_id": session_id})
