"""Start-up recovery after a crash (``kill -9``, power loss, OOM) or a stop in the middle of a turn.

What must be closed is derived from what is open, not from any one flag:
- every assistant message without ``time.completed`` is closed with an error, its open text and
  reasoning parts ended (their checkpointed text kept);
- every tool part left ``pending`` or ``running`` (in any message, also one that waited for a
  permission) becomes an error: its side effects are unknown, so it is never re-run;
- an interrupted step that started from a file snapshot gets the ``patch`` part it never wrote
  (the files changed since that snapshot), so undo reaches what its tools did before the stop;
- every session with an unsettled input (admitted, or promoted into a turn that never ended) is
  woken, so its unanswered prompts, including the interrupted one, are answered.

Idempotent: each session is closed in one transaction, and a second run finds nothing open, so a
crash during recovery is recovered by the next start.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction
from app.runtime.errors import SessionNotFound
from app.runtime.sessions._closing import closed_part, closed_reply
from app.runtime.sessions._coordinator import DrainCoordinator
from app.runtime.sessions._service import SessionService
from app.store import inputs
from app.store.events import HeldLease
from app.store.queries import Queries
from app.wire import Session

log = logging.getLogger("opensession.recovery")

# (directory, snapshot) -> the files changed since that snapshot (the snapshots domain, above us)
StepChanges = Callable[[str, str], Awaitable[list[str]]]

INTERRUPTED = {"name": "MessageAbortedError", "data": {"message": "Interrupted: the server stopped during this turn"}}


class _OpenWork:
    """What one session has left open: assistant messages and stray tool parts."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.parts: list[dict[str, Any]] = []
        self.patches: dict[str, dict[str, Any]] = {}  # message id -> the patch part it lacks

    async def find_patches(self, session: Session, queries: Queries, changes: StepChanges | None) -> None:
        """Before the closing transaction (git runs outside it): the patch of each open step."""
        if changes is None:
            return
        for message_id in self.messages:
            message = await queries.message(session["id"], message_id)
            parts = message["parts"] if message else []
            start = next((p.get("snapshot") for p in parts if p["type"] == "step-start"), None)
            if not start or any(p["type"] == "patch" for p in parts):
                continue
            files = await changes(session["directory"], start)
            if files:
                self.patches[message_id] = {
                    "id": ids.part_id(),
                    "sessionID": session["id"],
                    "messageID": message_id,
                    "type": "patch",
                    "hash": start,
                    "files": files,
                }


async def _close(
    tx: Transaction, session: Session, work: _OpenWork, queries: Queries, at: int, error: dict[str, Any]
) -> None:
    session_id, directory = session["id"], session["directory"]

    async def emit(event_type: str, props: dict[str, Any]) -> None:
        await tx.emit(event_type, {"sessionID": session_id, **props}, session_id=session_id, directory=directory)

    closed_parts: set[str] = set()
    for message_id in work.messages:
        message = await queries.message(session_id, message_id)
        if message is None:
            continue
        for part in message["parts"]:
            closed = closed_part(part, at)
            if closed is not None:
                closed_parts.add(part["id"])
                await emit("message.part.updated", {"part": closed, "time": at})
        if message_id in work.patches:
            await emit("message.part.updated", {"part": work.patches[message_id], "time": at})
        await emit("message.updated", {"info": closed_reply(message["info"], error, at)})
    for unlisted in work.parts:
        closed = closed_part(unlisted, at)
        if closed is not None and unlisted["id"] not in closed_parts:
            await emit("message.part.updated", {"part": closed, "time": at})


async def close_session(
    log_: EventLog,
    queries: Queries,
    session: Session,
    changes: StepChanges | None = None,
    *,
    error: dict[str, Any] = INTERRUPTED,
    settle: Sequence[str] = (),
) -> None:
    """Close what a dead drain left open in one session (a takeover: the caller now holds its
    lease, so nothing else writes there), or a failed one (``error`` says why). The inputs in
    ``settle`` are settled in the same transaction: their turn is over, and is not run again."""
    work = _OpenWork()
    work.messages = [m for _, m in await queries.open_assistant_messages(session["id"])]
    work.parts = [p for _, p in await queries.open_tool_parts(session["id"])]
    await work.find_patches(session, queries, changes)
    if work.messages or work.parts or settle:
        async with log_.transaction() as tx:
            await _close(tx, session, work, queries, now_ms(), error)
            for input_id in settle:
                inputs.complete(tx.scope, input_id)


async def recover(
    log_: EventLog,
    queries: Queries,
    sessions: SessionService,
    coordinator: DrainCoordinator,
    *,
    skip: set[str] | frozenset[str] = frozenset(),
    drains_under: Callable[[HeldLease | None], bool],
    changes: StepChanges | None = None,
) -> int:
    """Close what a stop left open and wake sessions with unanswered prompts; returns the number
    of sessions touched. Sessions in ``skip`` (leased by another process, live or lapsed) are
    left to their owner, or to the takeover that claims their lease; so is one whose lease, read
    under its hold in the closing transaction, ``drains_under`` says a drain may be writing under
    (claimed since ``skip`` was read: the check and the closing are one step under the hold)."""
    open_work: dict[str, _OpenWork] = defaultdict(_OpenWork)
    for session_id, message_id in await queries.open_assistant_messages():
        open_work[session_id].messages.append(message_id)
    for session_id, part in await queries.open_tool_parts():
        open_work[session_id].parts.append(part)
    waiting = set(await queries.sessions_with_unsettled_inputs())
    present: list[str] = []
    for session_id in sorted((open_work.keys() | waiting) - skip):
        try:
            session = await sessions.get(session_id)
        except SessionNotFound:
            continue
        present.append(session_id)
        if session_id in open_work:
            await open_work[session_id].find_patches(session, queries, changes)
            async with log_.transaction(hold=session_id) as tx:
                if not drains_under(tx.held_leases.get(session_id)):
                    await _close(tx, session, open_work[session_id], queries, now_ms(), INTERRUPTED)
    for session_id in present:  # woken only once everything open is closed
        if session_id in waiting:
            coordinator.wake(session_id)
    if present:
        log.info("recovered %d session(s) left open by the last stop", len(present))
    return len(present)
