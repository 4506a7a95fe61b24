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
and ``clear`` also refuse while an admitted prompt waits for its turn. So a revert is staged only
while no turn runs or is due, and the admission that commits it is never under a running turn.

Moving files is covered by no transaction, so ``stage`` and ``clear`` first check every file may
be restored (inside the session directory, from a recorded tree: else 400 ``RevertError`` and
nothing moves), then record a journal (``_journal``: every file with the snapshot to take it
from, and the marker to end with) in the transaction that makes the busy check, and only then
move files; the transaction that records the outcome deletes the journal. While a journal exists
no prompt is admitted (409), and it is finished (restoring again is idempotent) by the next
start, by whoever takes the session over from a dead process, or by the next ``stage``,
``clear`` or ``commit``: files and marker agree whatever point a kill -9 hit.
"""

from __future__ import annotations

import logging
from functools import partial

from app.events.log import EventLog, Transaction
from app.events.topology import LeaseLost
from app.runtime.errors import MessageNotFound, RevertFailed, SessionBusy, SessionNotFound
from app.runtime.history._diffs import SessionDiffs, plan_revert
from app.runtime.history._journal import Journal, finished, pending, pending_in, record, under_way
from app.runtime.history._service import History
from app.runtime.payloads import next_event
from app.runtime.snapshots import OutOfTime
from app.store import inputs
from app.wire import Session

log = logging.getLogger("opensession.revert")


async def commit_staged(tx: Transaction, history: History, session: Session) -> list[str]:
    """Apply ``session.revert`` (``session`` as current in ``tx``) inside ``tx``; returns the
    removed message ids. A marker whose message is already gone is simply cleared. SessionBusy
    while a revert or unrevert is under way: its files are moving, and a prompt admitted now
    would land between the two halves of it."""
    if await pending_in(tx, session["id"]) is not None:
        raise SessionBusy(session["id"])
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
    ) -> Session:
        """Mark the point to go back to and put the files the later steps changed back as they
        were; returns the session info (with ``with_files``, its revert also lists the diffs it
        undid). Raises MessageNotFound for a message outside the session."""
        async with self.history.still(session_id) as held:
            session = await self._finish_interrupted(held)
            await self.history.get_message(session_id, message_id)
            directory = session["directory"]
            messages = await self.history.get_messages(session_id, by_seq=True)
            plan = plan_revert(messages, message_id, part_id)
            previous = session.get("revert") or {}
            restore = plan.files()
            marker = dict(plan.point)
            if previous.get("snapshot"):  # moving an earlier revert: its files go back to the tree it found
                earlier = plan_revert(messages, previous["messageID"], previous.get("partID"))
                restore = dict.fromkeys(earlier.files(), str(previous["snapshot"])) | restore
                marker["snapshot"] = previous["snapshot"]
            elif snapshot := await self.files.track(directory):
                marker["snapshot"] = snapshot
            elif restore and await self.files.check(directory, restore):
                raise RevertFailed(f"Cannot revert: the files in {directory} could not be recorded first")
            undone = await self.diffs.between(directory, plan.undone) if with_files else []
            info = await self._run(session, Journal(restore, marker))
        if with_files:
            info["revert"] = {**info["revert"], "files": undone}
        return info

    async def clear(self, session_id: str) -> Session:
        """Forget the revert point and put back the files it had reverted (OpenCode's unrevert)."""
        async with self.history.still(session_id) as held:
            session = await self._finish_interrupted(held)
            revert = session.get("revert")
            if revert:
                restore: dict[str, str] = {}
                if revert.get("snapshot"):
                    messages = await self.history.get_messages(session_id, by_seq=True)
                    plan = plan_revert(messages, revert["messageID"], revert.get("partID"))
                    restore = dict.fromkeys(plan.files(), revert["snapshot"])
                return await self._run(session, Journal(restore, None))
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
        async with self.history.still(session_id) as held:
            await self._finish_interrupted(held)
            async with self.log.transaction() as tx:
                return await commit_staged(tx, self.history, await self.sessions.current(tx, session_id))

    async def recover(self) -> None:
        """At start: finish every revert and unrevert a stop interrupted. One that another live
        process holds is its own (or, once that process is dead, its taker's: see
        ``finish_taken_over``); one whose files cannot be restored now stays, and says why."""
        for session_id in await under_way(self.log.db):
            try:
                async with self.history.still(session_id) as session:
                    await self._finish_interrupted(session)
            except (SessionBusy, SessionNotFound):
                continue
            except RevertFailed as exc:
                log.warning("the revert under way in %s cannot be finished yet: %s", session_id, exc.message)

    async def finish_taken_over(self, session_id: str) -> None:
        """Finish the revert or unrevert of a session this process has just taken over from a
        dead one (the caller holds its lease)."""
        try:
            await self._finish_interrupted(await self.sessions.get(session_id))
        except RevertFailed as exc:
            log.warning("the revert under way in %s cannot be finished yet: %s", session_id, exc.message)

    async def _finish_interrupted(self, session: Session) -> Session:
        """``session`` (held still) once the revert or unrevert a stop left under way in it,
        if any, is finished."""
        journal = await pending(self.log.db, session["id"])
        return session if journal is None else await self._finish(session, journal)

    async def _run(self, session: Session, journal: Journal) -> Session:
        """Record ``journal`` and carry it out; returns the session info. Refused (SessionBusy)
        when a prompt was admitted or the marker moved since ``session`` was read, in the same
        transaction that records the journal: from there on no prompt is admitted (see
        ``commit_staged``), so the plan holds until the files are back and the outcome recorded."""
        session_id = session["id"]
        if journal.restore:
            await self.files.check(session["directory"], journal.restore)
        async with self.log.transaction() as tx:
            current = await self.sessions.current(tx, session_id)
            if current.get("revert") != session.get("revert") or await inputs.any_unsettled(tx.scope, session_id):
                raise SessionBusy(session_id)
            record(tx.scope, session_id, journal)
        return await self._finish(session, journal)

    async def _still_under_way(self, session_id: str, journal: Journal) -> bool:
        """Whether ``journal`` is still the session's, checked just before its files move, in a
        transaction of its own: one that holds the session under a lease since taken over
        raises LeaseLost there, so a process that lost the session moves none of its files.
        (One that stalls after this check finds its lease run out by its own clock before the
        next step of the restore: ``_finish``.)"""
        async with self.log.transaction() as tx:
            return await self._pending_is(tx, session_id, journal)

    async def _pending_is(self, tx: Transaction, session_id: str, journal: Journal) -> bool:
        """Whether ``journal`` is the session's in ``tx``, which holds the session from here on
        (so the answer stays true until ``tx`` commits)."""
        await self.sessions.current(tx, session_id)
        return await pending_in(tx, session_id) == journal

    async def _finish(self, session: Session, journal: Journal) -> Session:
        """Restore the journal's files, then record the outcome (the marker, its event, the
        session's diff) and drop the journal in one transaction, unless the journal was finished
        meanwhile; returns the session info. A failed restore leaves the journal for the next
        try."""
        session_id, directory = session["id"], session["directory"]
        if not await self._still_under_way(session_id, journal):
            return await self.sessions.get(session_id)
        lease_left = partial(self.history.coordinator.lease_left, session_id)
        try:  # each step of the restore begins only while the lease is sure to hold
            await self.files.restore(directory, journal.restore, lease_left)
        except OutOfTime as exc:  # this process stalled past it: the journal is the taker's to finish
            raise LeaseLost(session_id) from exc
        messages = await self.history.get_messages(session_id, by_seq=True)
        marker = journal.marker
        if marker is None:
            event, props, kept = "session.next.revert.cleared", next_event(session_id), messages
        else:
            if marker.get("snapshot"):
                now = await self.files.track(directory)
                diff = await self.files.patch_text(directory, marker["snapshot"], now or marker["snapshot"])
                marker = marker | {"diff": diff}
            event, props = "session.next.revert.staged", next_event(session_id, revert=marker)
            kept = plan_revert(messages, marker["messageID"], marker.get("partID")).kept
        diffs = await self.diffs.between(directory, kept)

        def record(info: Session) -> None:
            if marker is None:
                info.pop("revert", None)
            else:
                info["revert"] = marker

        async with self.log.transaction() as tx:
            if await self._pending_is(tx, session_id, journal):  # else another finished it (a takeover)
                info = await self.sessions.mutate(tx, session_id, record)
                await tx.emit(event, props, session_id=session_id, directory=directory)
                await self.diffs.publish(tx, info, diffs)
                finished(tx.scope, session_id)
        return await self.sessions.get(session_id)  # a copy: the one in the events stays as sent
