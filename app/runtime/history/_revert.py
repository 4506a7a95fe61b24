"""Revert: mark a point in a session's history to go back to, without deleting anything yet,
and put the files back as they were at that point.

- ``stage`` records ``session.revert = {messageID, partID?, snapshot?, diff?}`` and restores
  every file a later step changed to its state before that step's first change (``snapshot`` is
  the tree found before reverting, ``diff`` the git diff the revert made). Staging again from a
  reverted state first returns to that tree, so moving the point either way is exact.
- ``clear`` (unrevert) puts those files back as ``snapshot`` had them and forgets the point.
  Files the session's steps never changed are never touched. A file edited by hand after the
  agent changed it is reverted with the rest (as in OpenCode), and unrevert brings the hand
  edit back only if it was made before the revert.
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
from app.runtime.errors import MessageNotFound, RevertFailed, SessionBusy
from app.runtime.history._diffs import SessionDiffs, plan_revert
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
    def __init__(self, log: EventLog, history: History, diffs: SessionDiffs) -> None:
        self.log = log
        self.history = history
        self.sessions = history.sessions
        self.diffs = diffs
        self.files = diffs.files

    async def stage(
        self, session_id: str, message_id: str, part_id: str | None = None, *, with_files: bool = False
    ) -> dict[str, Any]:
        """Mark the point to go back to and put the files the later steps changed back as they
        were; returns the session info (with ``with_files``, its revert also lists the diffs it
        undid). Raises MessageNotFound for a message outside the session."""
        async with self.history.still(session_id) as session:
            await self.history.get_message(session_id, message_id)
            if await self.log.db.fetch(sql.UNSETTLED_INPUTS, {"session_id": session_id}):
                raise SessionBusy(session_id)  # a prompt is admitted and about to run
            directory = session["directory"]
            messages = await self.history.get_messages(session_id, by_seq=True)
            plan = plan_revert(messages, message_id, part_id)
            previous = session.get("revert") or {}
            snapshot = previous.get("snapshot") or await self.files.track(directory)
            restore = plan.files()
            if previous.get("snapshot"):  # moving an earlier revert: its files go back to the tree it found
                earlier = plan_revert(messages, previous["messageID"], previous.get("partID"))
                restore = dict.fromkeys(earlier.files(), str(previous["snapshot"])) | restore
            if restore and await self.files.check(directory, restore) and not snapshot:
                raise RevertFailed(f"Cannot revert: the files in {directory} could not be recorded first")
            await self.files.restore(directory, restore)
            revert = dict(plan.point)
            undone = await self.diffs.between(directory, plan.undone)
            if snapshot:
                now = await self.files.track(directory)
                revert |= {
                    "snapshot": snapshot,
                    "diff": await self.files.patch_text(directory, snapshot, now or snapshot),
                }
            diffs = await self.diffs.between(directory, plan.kept)
            try:
                async with self.log.transaction() as tx:
                    if await tx.fetch(sql.UNSETTLED_INPUTS, {"session_id": session_id}):
                        raise SessionBusy(session_id)  # admitted while the files were being reverted
                    info = await self.sessions.mutate(tx, session_id, lambda s: s.__setitem__("revert", revert))
                    await tx.emit(
                        "session.next.revert.staged",
                        next_event(session_id, revert=revert),
                        session_id=session_id,
                        directory=directory,
                    )
                    await self.diffs.publish(tx, info, diffs)
            except SessionBusy:
                if snapshot:
                    await self.files.restore(directory, dict.fromkeys(restore, snapshot))
                raise
        info = await self.sessions.get(session_id)
        if with_files:
            info["revert"] = {**info["revert"], "files": undone}
        return info

    async def clear(self, session_id: str) -> dict[str, Any]:
        """Forget the revert point and put back the files it had reverted (OpenCode's unrevert)."""
        async with self.history.still(session_id) as session:
            revert = session.get("revert") or {}
            messages = await self.history.get_messages(session_id, by_seq=True)
            if revert.get("snapshot"):
                plan = plan_revert(messages, revert["messageID"], revert.get("partID"))
                await self.files.restore(session["directory"], dict.fromkeys(plan.files(), revert["snapshot"]))
            diffs = await self.diffs.between(session["directory"], messages) if revert else None
            async with self.log.transaction() as tx:
                info = await self.sessions.mutate(tx, session_id, lambda s: s.pop("revert", None))
                await tx.emit(
                    "session.next.revert.cleared",
                    next_event(session_id),
                    session_id=session_id,
                    directory=session["directory"],
                )
                if diffs is not None:
                    await self.diffs.publish(tx, info, diffs)
        return await self.sessions.get(session_id) if diffs is not None else info

    async def commit(self, session_id: str) -> list[str]:
        async with self.history.still(session_id), self.log.transaction() as tx:
            return await commit_staged(tx, self.history, await self.sessions.current(tx, session_id))
