"""Revert: mark a point in a session's history to go back to, without deleting anything yet.

- ``stage`` records ``session.revert = {messageID, partID?}``; ``clear`` forgets it.
- ``commit`` removes the marked message (or, with ``partID``, that part and the parts after it)
  and every message that entered the session after it, each with ``message.removed`` /
  ``message.part.removed``, settles their inputs, and clears the marker.
- The next prompt commits a staged revert first, in its admission transaction (as OpenCode's
  legacy API does), so the new prompt continues from the revert point.
A busy session refuses all three (409 ``SessionBusyError``): history must not move under a turn.
Each holds the session still (``History.still``) from its busy check to its commit, and ``stage``
also refuses while an admitted prompt waits for its turn. So a revert is staged only while no
turn runs or is due, and the admission that commits it is never under a running turn.
"""

from __future__ import annotations

from typing import Any

from app.events.log import EventLog, Transaction
from app.runtime.errors import MessageNotFound, SessionBusy
from app.runtime.history._service import History
from app.runtime.payloads import next_event
from app.store import sql


async def commit_staged(tx: Transaction, history: History, session: dict[str, Any]) -> list[str]:
    """Apply ``session.revert`` (``session`` as current in ``tx``) inside ``tx``; returns the
    removed message ids. A marker whose message is already gone is simply cleared."""
    revert = session.get("revert")
    if not revert:
        return []
    try:
        removed = await history.truncate_messages(tx, session, revert["messageID"], revert.get("partID"))
    except MessageNotFound:
        removed = []
    await history.sessions.mutate(tx, session["id"], lambda info: info.pop("revert", None))
    await tx.emit(
        "session.next.revert.committed",
        next_event(session["id"], messageID=revert["messageID"]),
        session_id=session["id"],
        directory=session["directory"],
    )
    return removed


class Reverts:
    def __init__(self, log: EventLog, history: History) -> None:
        self.log = log
        self.history = history
        self.sessions = history.sessions

    async def stage(self, session_id: str, message_id: str, part_id: str | None = None) -> dict[str, Any]:
        """Mark ``message_id`` (and optionally ``part_id``) as the point to revert to; returns the
        session info. Raises MessageNotFound for a message outside the session."""
        async with self.history.still(session_id) as session:
            await self.history.get_message(session_id, message_id)
            revert = {"messageID": message_id} | ({"partID": part_id} if part_id else {})
            async with self.log.transaction() as tx:
                if await tx.fetch(sql.UNSETTLED_INPUTS, {"session_id": session_id}):
                    raise SessionBusy(session_id)  # a prompt is admitted and about to run
                info = await self.sessions.mutate(tx, session_id, lambda s: s.__setitem__("revert", revert))
                await tx.emit(
                    "session.next.revert.staged",
                    next_event(session_id, revert=revert),
                    session_id=session_id,
                    directory=session["directory"],
                )
        return info

    async def clear(self, session_id: str) -> dict[str, Any]:
        async with self.history.still(session_id) as session, self.log.transaction() as tx:
            info = await self.sessions.mutate(tx, session_id, lambda s: s.pop("revert", None))
            await tx.emit(
                "session.next.revert.cleared",
                next_event(session_id),
                session_id=session_id,
                directory=session["directory"],
            )
        return info

    async def commit(self, session_id: str) -> list[str]:
        async with self.history.still(session_id), self.log.transaction() as tx:
            return await commit_staged(tx, self.history, await self.sessions.current(tx, session_id))
