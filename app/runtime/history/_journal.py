"""The journal of a revert or unrevert under way (a row of ``reverts``): what the operation will
have done once finished, so that whoever finds it (the next start, or the next revert
operation on the session) can finish it from any point.

Invariant: it is written before the first file moves, in the transaction that checks the
session may move, and deleted by the transaction that records the outcome. Finishing restores
every file again (restoring is idempotent), so a journal finished twice, or after a partial
restore, leaves the same files and marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.events.log import Transaction
from app.jsonutil import dumps, loads
from app.store import reverts
from app.store.database import Reader, WriteScope


@dataclass(frozen=True, slots=True)
class Journal:
    """Every file to restore (absolute path -> the snapshot to take it from), and the revert
    marker the session is to have: the one a revert stages, or None for an unrevert."""

    restore: dict[str, str]
    marker: dict[str, Any] | None

    def encode(self) -> str:
        return dumps({"restore": self.restore, "marker": self.marker})


async def pending(reader: Reader, session_id: str) -> Journal | None:
    """The session's journal, if a revert or unrevert is under way."""
    return _decoded(await reverts.journal(reader, session_id))


async def pending_in(tx: Transaction, session_id: str) -> Journal | None:
    """``pending`` inside ``tx``: as its start read it under the session's hold, where it did (once:
    a later read sees what ``tx`` itself wrote)."""
    if session_id in tx.held_journals:
        return _decoded(tx.held_journals.pop(session_id))
    return await pending(tx.scope, session_id)


def _decoded(text: str | None) -> Journal | None:
    if text is None:
        return None
    data = loads(text)
    return Journal(data["restore"], data["marker"])


def record(scope: WriteScope, session_id: str, journal: Journal) -> None:
    reverts.save(scope, session_id, journal.encode())


def finished(scope: WriteScope, session_id: str) -> None:
    reverts.drop(scope, session_id)


under_way = reverts.under_way  # the sessions with a journal
