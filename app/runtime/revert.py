"""Revert: mark a point in a session's history to go back to, without deleting anything yet.

- ``stage`` records ``session.revert = {messageID, partID?}``; ``clear`` forgets it.
- ``commit`` removes the marked message (or, with ``partID``, that part and the parts after it)
  and every message that entered the session after it, each with ``message.removed`` /
  ``message.part.removed``, settles their inputs, and clears the marker.
- The next prompt commits a staged revert first, in its admission transaction (as OpenCode's
  legacy API does), so the new prompt continues from the revert point.
A busy session refuses all three (409 ``SessionBusyError``): history must not move under a turn.
"""

from __future__ import annotations

from typing import Any

from app.events.log import EventLog, Transaction
from app.runtime.coordinator import DrainCoordinator
from app.runtime.errors import MessageNotFound, SessionBusy
from app.runtime.payloads import next_event
from app.runtime.sessions import SessionService
from app.store import sql
from app.store.queries import Queries


async def commit_staged(tx: Transaction, sessions: SessionService, session: dict[str, Any]) -> list[str]:
    """Apply ``session.revert`` (of ``session`` as current in ``tx``) inside ``tx``; returns the
    removed message ids."""
    revert = session.get("revert")
    if not revert:
        return []
    session_id, directory = session["id"], session["directory"]
    boundary = revert["messageID"]
    removed: list[str] = []
    rows = await tx.fetch(sql.MESSAGE_SEQ, {"id": boundary, "session_id": session_id})
    if rows:
        later = [row[0] for row in await tx.fetch(sql.MESSAGES_FROM_SEQ, {"session_id": session_id, "seq": rows[0][0]})]
        if revert.get("partID"):
            for (part_id,) in await tx.fetch(sql.PART_IDS_FROM, {"message_id": boundary, "part_id": revert["partID"]}):
                props = {"sessionID": session_id, "messageID": boundary, "partID": part_id}
                await tx.emit("message.part.removed", props, session_id=session_id, directory=directory)
            later = [mid for mid in later if mid != boundary]
        for message_id in later:
            await tx.emit(
                "message.removed",
                {"sessionID": session_id, "messageID": message_id},
                session_id=session_id,
                directory=directory,
            )
            tx.execute(sql.COMPLETE_INPUT, {"id": message_id})
            removed.append(message_id)
    await sessions.mutate(tx, session_id, lambda info: info.pop("revert", None))
    await tx.emit(
        "session.next.revert.committed",
        next_event(session_id, messageID=boundary),
        session_id=session_id,
        directory=directory,
    )
    return removed


class Reverts:
    def __init__(
        self, log: EventLog, queries: Queries, sessions: SessionService, coordinator: DrainCoordinator
    ) -> None:
        self.log = log
        self.queries = queries
        self.sessions = sessions
        self.coordinator = coordinator

    async def _idle_session(self, session_id: str) -> dict[str, Any]:
        session = await self.sessions.get(session_id)
        if self.coordinator.is_active(session_id):
            raise SessionBusy(session_id)
        return session

    async def stage(self, session_id: str, message_id: str, part_id: str | None = None) -> dict[str, Any]:
        """Mark ``message_id`` (and optionally ``part_id``) as the point to revert to; returns the
        session info. Raises MessageNotFound for a message outside the session."""
        session = await self._idle_session(session_id)
        if await self.queries.message(session_id, message_id) is None:
            raise MessageNotFound(session_id, message_id)
        revert = {"messageID": message_id} | ({"partID": part_id} if part_id else {})
        async with self.log.transaction() as tx:
            info = await self.sessions.mutate(tx, session_id, lambda s: s.__setitem__("revert", revert))
            await tx.emit(
                "session.next.revert.staged",
                next_event(session_id, revert=revert),
                session_id=session_id,
                directory=session["directory"],
            )
        return info

    async def clear(self, session_id: str) -> dict[str, Any]:
        session = await self._idle_session(session_id)
        async with self.log.transaction() as tx:
            info = await self.sessions.mutate(tx, session_id, lambda s: s.pop("revert", None))
            await tx.emit(
                "session.next.revert.cleared",
                next_event(session_id),
                session_id=session_id,
                directory=session["directory"],
            )
        return info

    async def commit(self, session_id: str) -> list[str]:
        session = await self._idle_session(session_id)
        async with self.log.transaction() as tx:
            return await commit_staged(tx, self.sessions, await self.sessions.current(tx, session["id"]))
