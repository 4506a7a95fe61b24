"""What a client or a tool does to a session's work: prompt it (and wait for the answer), run a
sub-agent in a child session, abort, interrupt, summarize, wait until it is idle.

Built before the tools and the turn domain, which use it through their own protocols
(``Subagents``, ``Prompter``), so no domain is handed the whole runtime. Each operation is
written once for every topology: where another process drains the session, the sessions
domain's ``Topology`` forwards or waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from app.config import reading
from app.events.bus import Overflowed, Subscription
from app.events.log import EventLog
from app.observability import metrics, tracing
from app.providers.registry import ModelRef
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.errors import SessionNotFound
from app.runtime.extensions import Extensions
from app.runtime.history import History, MessageWithParts
from app.runtime.inputs import Admitted, InputsDomain, PromptRequest, compaction_request
from app.runtime.sessions import SessionsDomain
from app.runtime.workspace import Workspace
from app.store.queries import InputRow, Queries
from app.wire import Session, SessionStatus

SETTLE_GRACE_SECONDS = 5.0
# What another process's drain says of a session that may settle a prompt waited for here.
_SETTLING = frozenset({"session.status", "session.idle", "message.updated"})


async def _first(waiter: asyncio.Future[str | None], heard: Subscription | None, seconds: float | None) -> str | None:
    """Wait for ``waiter`` (the reply's id, or None), an event ``heard``, or ``seconds``; what the
    waiter said, if it said it."""
    if heard is None:
        with suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(waiter), seconds)
        return None
    listening = asyncio.ensure_future(heard.next(seconds or 0.0))
    try:
        either: list[asyncio.Future[Any]] = [waiter, listening]
        await asyncio.wait(either, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        listening.cancel()
        with suppress(asyncio.CancelledError, Overflowed):
            await listening  # an overflow: the caller subscribes again
    return waiter.result() if waiter.done() else None


@dataclass(frozen=True)
class _Settled:
    unsettled: list[InputRow]  # the session's inputs still unsettled
    reply: MessageWithParts | None  # the reply a turn here settled the input with, if read


class Prompting:
    def __init__(
        self,
        log: EventLog,
        queries: Queries,
        sessions: SessionsDomain,
        inputs: InputsDomain,
        history: History,
        workspace: Workspace,
        extensions: Extensions,
        announce: Callable[[str, SessionStatus], None],
    ) -> None:
        self.log, self.queries, self.history = log, queries, history
        self.sessions, self.coordinator, self._topology = sessions.service, sessions.coordinator, sessions.topology
        self.admission, self.waiters = inputs.admission, inputs.waiters
        self.workspace, self.extensions = workspace, extensions
        self._announce = announce  # a status change, as the runtime announces every one

    async def prompt(self, session_id: str, request: PromptRequest, *, resume: bool = True) -> Admitted:
        """Admit, then wake the session's drain (unless ``resume`` is false: a running drain still
        picks the prompt up). Returns once the prompt is durable. The configuration is read once
        for all of it."""
        began = time.perf_counter()
        # The drain a wake starts inherits this context: its span is a child of the admission's.
        with reading(), tracing.span("admission", **{"session.id": session_id}):
            admitted = await self.admission.admit(session_id, request, reserve=resume)
            metrics.RECORDER.admission(time.perf_counter() - began)
            directory = self.sessions.cached_directory(session_id)
            if directory is not None:
                self.workspace.watch(directory)
                self.extensions.warm(directory)  # MCP servers connect meanwhile; admission never waits
            if resume and not request.no_reply and admitted.wake:
                self.coordinator.wake(session_id)
        return admitted

    async def prompt_and_wait(self, session_id: str, request: PromptRequest) -> MessageWithParts:
        """Admit, wait until this prompt's turn has settled, and return the message that answers
        it (the user message itself for ``noReply``); an aborted turn returns its aborted reply."""
        message_id = (await self.prompt(session_id, request)).message_id
        if request.no_reply:
            return await self.history.get_message(session_id, message_id)
        settled = await self._settled(session_id, message_id)
        if not settled.unsettled:
            # The answer is complete; as in OpenCode the call returns once the busy period has
            # ended too, so a follow-up (a shell command, a revert) does not find it busy.
            with suppress(TimeoutError):
                await asyncio.wait_for(self.coordinator.await_idle(session_id), SETTLE_GRACE_SECONDS)
        reply = settled.reply
        if reply is None or reply["info"].get("parentID") != message_id:
            reply = await self.queries.last_assistant(session_id, parent_id=message_id)
        if reply is None:
            reply = await self.queries.last_assistant(session_id)
        return reply if reply is not None else await self.history.get_message(session_id, message_id)

    async def _settled(self, session_id: str, input_id: str) -> _Settled:
        """Return once input ``input_id`` is settled, or nothing is left to settle it, with the
        session's inputs still unsettled then (read with it: one read, not two) and, when a turn
        here answered it, that reply (read at the same time).

        Registered before the input is read: a settle in between still resolves the waiter. An
        idle announcement releases every waiter of the session (an abort), so re-check then: a
        prompt admitted during an abort's clean-up is answered by the drain that follows. Where
        another process drains the session, its announcements and its reply's updates (relayed
        here) prompt a re-read, and a timer too, for as long as the topology's ``patience`` says."""
        patience = self._topology.patience
        unowned = 0
        answered: str | None = None
        elsewhere: Subscription | None = None  # what another process's drain says of the session
        try:
            while True:
                waiter = self.waiters.register(session_id, input_id)
                if answered is None:
                    unsettled, reply = await self.queries.unsettled_inputs(session_id), None
                else:
                    unsettled, reply = await asyncio.gather(
                        self.queries.unsettled_inputs(session_id), self.queries.message(session_id, answered)
                    )
                if all(row.id != input_id for row in unsettled):  # completed (or its session is gone)
                    return _Settled(unsettled, reply)
                here = self.coordinator.is_active(session_id)
                unowned = 0 if here or await self._topology.leased(session_id) else unowned + 1
                if unowned >= patience.rounds:  # nobody drains it: it will not be answered now
                    return _Settled(unsettled, None)
                if not here and patience.seconds is not None and (elsewhere is None or elsewhere.overflowed):
                    elsewhere = self.log.bus.subscribe(lambda e: e.type in _SETTLING, session=session_id)
                    continue  # read again: what was said before it subscribed is not in it
                answered = await _first(waiter, None if here else elsewhere, patience.seconds)
        finally:
            self.waiters.forget(session_id, input_id)
            if elsewhere is not None:
                elsewhere.close()

    async def abort(self, session_id: str) -> None:
        """Legacy abort: stop the turn and drop the prompts queued behind it (they stay in the
        history unanswered). When nothing runs OpenCode still announces idle. In a cluster the
        process draining the session does it."""
        if await self.stop(session_id):
            return
        through = await self.log.committed_seq(session_id)
        if await self._topology.forward(session_id, "abort", through=through):
            return
        with suppress(SessionNotFound):
            await self.sessions.get(session_id)
            self._announce(session_id, {"type": "idle"})

    async def stop(self, session_id: str) -> bool:
        """Interrupt the session's drain and drop the prompts admitted so far that it has not
        answered; a prompt admitted after this call is answered by a new drain."""
        through = await self.log.committed_seq(session_id)
        return await self.coordinator.interrupt(session_id, settle_through=through)

    async def summarize(
        self, session_id: str, model: ModelRef | None = None, *, request_key: str | None = None
    ) -> None:
        """Compact the session's history now and return once the summary is stored (or failed).
        The request sent again with its ``request_key`` waits for the summary the first began."""
        request = compaction_request("manual", model)
        request.request_key = request_key
        admitted = await self.prompt(session_id, request)
        await self._settled(session_id, admitted.message_id)

    async def run(
        self, parent: Session, description: str, prompt: str, agent: str, signal: AbortSignal
    ) -> tuple[Session, str]:
        """The ``task`` tool: run ``prompt`` in a new child session and return its final answer.
        Aborting the parent's turn interrupts the child too."""
        child = await self.sessions.create(
            parent["directory"], parent_id=parent["id"], title=f"{description} (@{agent} subagent)"
        )
        model = parent.get("model")
        request = PromptRequest(
            parts=[{"type": "text", "text": prompt}],
            agent=agent,
            model=ModelRef(model["providerID"], model["id"]) if model else None,
        )
        try:
            reply = await signal.race(self.prompt_and_wait(child["id"], request))
        except Aborted:
            await self.stop(child["id"])
            raise
        text = "".join(p.get("text", "") for p in reply["parts"] if p["type"] == "text")
        return child, text or "(the sub-agent gave no answer)"

    async def interrupt(self, session_id: str) -> None:
        """V2 interrupt: stop the running step; prompts still waiting stay admitted and run at the
        next wake."""
        await self.sessions.get(session_id)
        if not await self.coordinator.interrupt(session_id):
            await self._topology.forward(session_id, "interrupt")

    async def wait_idle(self, session_id: str) -> None:
        """Return once the session is idle here and, in a cluster, on every process."""
        await self.sessions.get(session_id)
        await self.coordinator.await_idle(session_id)
        await self._topology.await_idle(session_id)
