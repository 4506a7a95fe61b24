"""Writes to the ``snapshots`` table (named before the word meant only file snapshots): a
session's compaction summaries, versioned (``Queries`` reads the latest for everyone else).

Invariant: versions of a session grow by one; a writer checks the latest version in the
transaction that inserts the next (optimistic concurrency)."""

from __future__ import annotations

from app.store import sql
from app.store.database import Reader, WriteScope


async def latest_version(reader: Reader, session_id: str) -> int:
    """The session's newest summary version (0 before its first)."""
    rows = await reader.fetch(sql.LATEST_SUMMARY, {"session_id": session_id})
    return int(rows[0][1]) if rows else 0


def insert(
    scope: WriteScope,
    *,
    session_id: str,
    version: int,
    through_seq: int,
    message_id: str,
    reason: str,
    summary: str,
    time_created: int,
) -> None:
    scope.execute(
        sql.INSERT_SUMMARY,
        {
            "session_id": session_id,
            "version": version,
            "through_seq": through_seq,
            "message_id": message_id,
            "reason": reason,
            "summary": summary,
            "time_created": time_created,
        },
    )
