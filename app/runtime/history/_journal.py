"""The journal of a revert or unrevert under way (a row of ``reverts``): what the operation will
have done once finished, so that whoever finds it (the next start, or the next revert
operation on the session) can finish it from any point.

Invariant: it is written before the first file moves, in the transaction that checks the
session may move, and deleted by the transaction that records the outcome. Finishing restores
every file again (restoring is idempotent), so a journal finished twice, or after a partial
restore, leaves the same files and marker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.jsonutil import dumps, loads
from app.store import sql
from app.store.statement import Statement

Fetch = Callable[[Statement, dict[str, Any]], Awaitable[Any]]  # a database's or a transaction's fetch


@dataclass(frozen=True, slots=True)
class Journal:
    """Every file to restore (absolute path -> the snapshot to take it from), and the revert
    marker the session is to have: the one a revert stages, or None for an unrevert."""

    restore: dict[str, str]
    marker: dict[str, Any] | None

    def encode(self) -> str:
        return dumps({"restore": self.restore, "marker": self.marker})


async def pending(fetch: Fetch, session_id: str) -> Journal | None:
    """The session's journal, if a revert or unrevert is under way."""
    rows = await fetch(sql.REVERT, {"session_id": session_id})
    if not rows:
        return None
    data = loads(rows[0][0])
    return Journal(data["restore"], data["marker"])


async def under_way(fetch: Fetch) -> list[str]:
    """The sessions with a journal."""
    return [row[0] for row in await fetch(sql.REVERTS_UNDER_WAY, {})]
