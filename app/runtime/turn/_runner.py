"""The drain loop: promote what is waiting, run one step against the model, repeat until nothing
is pending.

Which inputs a step answers (OpenCode's delivery rules):
- inputs promoted before a crash and never answered are answered first (recovery);
- otherwise every waiting ``steer`` input, promoted together at this step boundary;
- otherwise the single oldest waiting ``queue`` input.
So a steer admitted mid-turn is answered right after the current step, before earlier queued
prompts, and queued prompts each get their own turn, oldest first.

A step: promote the inputs (``session.next.prompted``; a deferred V2 prompt gets its user message
now), open an assistant message answering the last of them, stream the model into it, and retry
retryable provider failures per OpenCode's policy (status ``retry`` meanwhile).

Invariant: an input is settled (``completed``) in the same transaction as the last step of the
turn that answers it, never earlier: a turn whose model asked for tools goes on, and a crash in a
later step must find its inputs still open so the next start answers them. An abort keeps the
partial text and ends the message with ``MessageAbortedError`` (the turn's inputs are settled); a
shutdown settles nothing, so the next start recovers the work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from app import ids
from app.clock import now_ms
from app.config import ConfigError, reading
from app.events.log import Transaction
from app.events.model import Event
from app.events.topology import LeaseLost
from app.observability import logs, metrics, tracing
from app.providers.base import (
    ChatRequest,
    Finish,
    ModelInfo,
    Provider,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolInputStart,
)
from app.providers.options import tune
from app.providers.registry import ModelNotFoundError, ModelRef
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.errors import Conflict, DatabaseUnavailable, SessionNotFound
from app.runtime.history import (
    HistoryDomain,
)
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs import InputsDomain, StoredPrompt, is_compaction, user_message_info
from app.runtime.payloads import next_event
from app.runtime.sessions import BUSY, SessionsDomain, zero_tokens
from app.runtime.snapshots import FileSnapshots
from app.runtime.turn._pacing import Slot, StepPacer
from app.runtime.turn._recorder import ABORTED, AssistantRecorder
from app.runtime.turn._retry import MAX_RETRIES, is_retryable, retry_delay_ms, status_message
from app.runtime.turn._steps import CompactionStep, ModelStep, StepKind, StepPlan
from app.runtime.turn._title import TitleGenerator
from app.runtime.turn._toolcalls import ToolCalls, TurnTools
from app.store import inputs
from app.store.queries import InputRow, StepWork
from app.wire import AssistantMessage, Session

log = logging.getLogger("opensession.runner")

MAX_STEERS_PER_STEP = 100
# A provider's stream is read this many events at a time before the loop runs others: when a
# burst is buffered (a long reply sent at once), reading it never suspends, and one session would
# hold the loop, and every other session's admissions and deltas, until its burst was through.
STREAM_EVENTS_PER_PASS = 32
MAX_STEPS_PER_TURN = 25  # the last step is offered no tools, so a runaway tool loop ends
# The error of a reply a failed drain left open, closed by the next drain of its session.
UNRECORDED = {
    "name": "UnknownError",
    "data": {"message": "The reply could not be recorded to its end (the database refused a write)"},
}


def usage_of(step: dict[str, Any]) -> metrics.Usage:
    """A step's usage (as ``finish_step`` returns it) for the metrics."""
    tokens = step["tokens"]
    cache = tokens["cache"]
    return metrics.Usage(
        tokens["input"], tokens["output"], tokens["reasoning"], cache["read"], cache["write"], step["cost"]
    )


def _add_usage(totals: Session, step: dict[str, Any]) -> None:
    totals["cost"] = totals.get("cost", 0) + step["cost"]
    tokens = totals.setdefault("tokens", zero_tokens())
    for key in ("input", "output", "reasoning"):
        tokens[key] = tokens.get(key, 0) + step["tokens"][key]
    for key in ("read", "write"):
        tokens["cache"][key] = tokens["cache"].get(key, 0) + step["tokens"]["cache"][key]


@dataclass
class Turn:
    """What the steps of one turn share: the inputs it answers so far (settled together when the
    turn ends), its tool use (for the doom loop) and the tree the last step ended with (the next
    step starts from it: nothing of ours runs in between)."""

    inputs: list[str] = field(default_factory=list)
    tools: TurnTools = field(default_factory=TurnTools)
    last_tree: str | None = None  # the tree its last step ended with
    first: str | None = None  # the tree its first step started from
    recorder: AssistantRecorder | None = None  # the step's reply, once it has one
    # What the metrics see of it: its model (once its first step resolved one), when it began,
    # whether its first event streamed, and the error it ended with.
    ref: ModelRef | None = None
    began: float = field(default_factory=time.perf_counter)
    streamed: bool = False
    error: str | None = None
    reply: str | None = None  # the message that settled its inputs, once that commit is done

    def start(self, ref: ModelRef) -> None:
        if self.ref is None:
            self.ref = ref
            metrics.RECORDER.turn_started(ref.provider_id, ref.model_id)

    def first_event(self) -> None:
        if not self.streamed and self.ref is not None:
            self.streamed = True
            metrics.RECORDER.first_token(self.ref.provider_id, self.ref.model_id, time.perf_counter() - self.began)

    def ended(self) -> None:
        if self.ref is not None:
            seconds = time.perf_counter() - self.began
            metrics.RECORDER.turn_ended(self.ref.provider_id, self.ref.model_id, seconds, self.error)
            outcome = f"failed ({self.error})" if self.error else "finished"
            tracing.annotate(provider=self.ref.provider_id, model=self.ref.model_id, outcome=self.error or "finished")
            log.info("turn %s on %s/%s in %.3f s", outcome, self.ref.provider_id, self.ref.model_id, seconds)


def next_batch(unsettled: list[InputRow]) -> list[InputRow]:
    """The inputs the next step answers (see the module docstring). A compaction request is
    always a step of its own."""
    interrupted = [row for row in unsettled if row.promoted_seq is not None]
    steers = [row for row in unsettled if row.delivery == "steer"]
    batch = interrupted or steers[:MAX_STEERS_PER_STEP] or unsettled[:1]
    for index, row in enumerate(batch):
        if is_compaction(row):
            return batch[:index] or [row]
    return batch


@dataclass
class Runner:
    """Runs sessions' drains; the services it needs are its fields."""

    infra: Infrastructure
    sessions: SessionsDomain
    inputs: InputsDomain
    history: HistoryDomain
    toolcalls: ToolCalls
    titles: TitleGenerator
    pacer: StepPacer = field(default_factory=StepPacer)
    _model_step: ModelStep = field(init=False)
    _compaction_step: CompactionStep = field(init=False)
    # Sessions whose last drain here ended with its reply open: not even its error could be
    # written (a full disk). Until that reply is closed, nothing else of the session runs.
    left_open: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._model_step = ModelStep(self.history, self.toolcalls, self.inputs, self.titles, self.infra.config)
        self._compaction_step = CompactionStep(self.history, self.infra.queries)

    async def drain(self, session_id: str, signal: AbortSignal) -> None:
        logs.SESSION_ID.set(session_id)  # the drain's own task: its log lines name the session
        with tracing.span("drain", **{"session.id": session_id}):
            await self._drain(session_id, signal)

    async def _drain(self, session_id: str, signal: AbortSignal) -> None:
        if session_id in self.left_open:
            await self._close_left_open(session_id)
        try:
            # Each step's first read: the session as it stands, its unsettled inputs and their window.
            while (work := await self.infra.queries.step_work(session_id)) and (batch := next_batch(work.inputs)):
                if signal.fired and (signal.reason != "abort" or all(row.promoted_seq is not None for row in batch)):
                    # A shutdown leaves the batch to the next start. An abort settles it, here when
                    # its prompts have their reply already (the pass after a database outage),
                    # else in the step, which gives the first its reply, marked aborted.
                    signal.check()
                await self._turn(work, batch, signal)
                if len(batch) == len(work.inputs) and self.sessions.coordinator.release_sees_admissions:
                    # The turn settled all it read; a prompt admitted since keeps the lease at its
                    # release, for another pass: no read of its own to find nothing left.
                    return
        except Aborted as exc:
            if exc.reason == "abort" and signal.settle_through is not None:
                through = signal.settle_through
                await self._settle_waiting(session_id, through)
                if any(row.admitted_seq > through for row in await self.infra.queries.unsettled_inputs(session_id)):
                    # Admitted after the abort: its wake may have been dropped with the aborted
                    # busy period's, so the drain after this one answers it.
                    self.sessions.coordinator.wake(session_id)
            raise
        except (LeaseLost, DatabaseUnavailable):
            raise  # the session's new owner, or the drain after the outage, closes what is open
        except Exception:
            self.left_open.add(session_id)
            raise

    async def _close_left_open(self, session_id: str) -> None:
        """Close the reply the last drain left open, settling the inputs it answered (promoted):
        they were answered, if not to the end, and are not answered again. Raises (and the
        session stays marked) while the database still refuses the write."""
        answered = [
            row.id for row in await self.infra.queries.unsettled_inputs(session_id) if row.promoted_seq is not None
        ]
        with suppress(SessionNotFound):  # deleted meanwhile: nothing is left to close
            await self.sessions.close_failed(self.infra, session_id, answered, UNRECORDED, self.snapshots.changed_since)
        self.left_open.discard(session_id)

    async def _turn(self, work: StepWork, batch: list[InputRow], signal: AbortSignal) -> None:
        with tracing.span("turn", **{"session.id": work.session["id"]}):
            await self._turn_steps(work, batch, signal)

    async def _turn_steps(self, work: StepWork, batch: list[InputRow], signal: AbortSignal) -> None:
        """Steps until the model stops asking for tools: each continuation answers the same
        prompt, and steers admitted meanwhile join it at the step boundary."""
        turn = Turn()
        try:
            steps = 1
            with reading():  # each step reads the configuration once (an edit applies to the next)
                more = await self._step(work, batch, signal, turn)
            while more:
                session_id = work.session["id"]
                if (latest := await self.infra.queries.step_work(session_id)) is None:
                    raise SessionNotFound(session_id)
                work = latest
                steers = [
                    row
                    for row in work.inputs
                    if row.delivery == "steer" and row.promoted_seq is None and not is_compaction(row)
                ]
                steps += 1
                with reading():
                    more = await self._step(
                        work, steers, signal, turn, parent=batch[-1], last_step=steps >= MAX_STEPS_PER_TURN
                    )
        except Aborted as exc:
            if exc.reason != "abort":  # a shutdown: the next start goes on with the turn
                turn.ref = None
            raise
        except (LeaseLost, DatabaseUnavailable):
            turn.ref = None  # not ended: another drain finishes it
            raise
        except Exception:
            turn.error = turn.error or "UnknownError"
            raise
        finally:
            turn.ended()
            for input_id in turn.inputs:
                self.inputs.waiters.settle(input_id, turn.reply)

    async def _settle_waiting(self, session_id: str, through_seq: int) -> None:
        """A legacy abort stops the whole busy period: prompts queued behind the aborted turn stay
        in the history as user messages but are not answered (as in OpenCode). Only inputs
        admitted before the abort (``admitted_seq <= through_seq``) are dropped: a prompt that got
        its 204 while the abort was settling is answered by the next drain. A V2 prompt not yet
        taken into a turn is not in the history: it stays admitted, parked until the session's
        next wake, as OpenCode's interrupt leaves it (dropping it would lose it without a trace)."""
        waiting = await self.infra.queries.unsettled_inputs(session_id)
        async with self.infra.log.transaction() as tx:  # checks the drain's lease
            for row in waiting:
                if row.admitted_seq <= through_seq and not _parked(row):
                    inputs.complete(tx.scope, row.id)
        self.inputs.waiters.settle_session(session_id)

    async def _promote(self, tx: Transaction, session: Session, batch: list[InputRow]) -> None:
        for row in batch:
            if row.promoted_seq is not None:
                continue
            stored = StoredPrompt.from_json(row.prompt)
            prompted = await tx.emit(
                "session.next.prompted",
                next_event(session["id"], messageID=row.id, prompt=stored.prompt, delivery=row.delivery),
                session_id=session["id"],
                directory=session["directory"],
            )
            if stored.deferred:
                info = user_message_info(session["id"], row.id, stored, now_ms())
                await self.history.service.append_message(tx, session, info, stored.parts)
            assert prompted.seq is not None
            inputs.promote(tx.scope, row.id, prompted.seq)

    async def _step(
        self,
        work: StepWork,
        batch: list[InputRow],
        signal: AbortSignal,
        turn: Turn,
        *,
        parent: InputRow | None = None,
        last_step: bool = False,
    ) -> bool:
        """One model call answering ``batch`` (or continuing ``parent``'s turn); returns whether
        the turn goes on (the model called tools and nothing blocked). The step that ends the
        turn, however it ends, settles every input the turn answered. It starts once the pacer
        grants it a slot and gives the slot back when its stream ends (``_pacing``)."""
        try:
            slot = await signal.race(self.pacer.acquire())
        except Aborted as exc:
            if exc.reason != "abort" or parent is not None:
                raise
            slot = Slot(None)  # aborted before its turn began: the step opens all the same (_step_in)
        try:
            return await self._step_in(slot, work, batch, signal, turn, parent=parent, last_step=last_step)
        except (Aborted, LeaseLost, DatabaseUnavailable):
            raise
        except Exception as exc:  # a write refused (a full disk) or a fault: the turn reports it
            if turn.recorder is None:
                raise
            log.exception("a step of %s failed", work.session["id"])
            await self._fail(turn.recorder, turn, {"name": "UnknownError", "data": {"message": str(exc)}})
            return False
        finally:
            slot.release()
            if turn.recorder is not None:
                await turn.recorder.stop_opening()

    async def _step_in(
        self,
        slot: Slot,
        work: StepWork,
        batch: list[InputRow],
        signal: AbortSignal,
        turn: Turn,
        *,
        parent: InputRow | None,
        last_step: bool,
    ) -> bool:
        """Plan, open, stream, finish: the same for both kinds of step (``_steps``)."""
        turn.recorder = None  # until this step has its own
        answered = batch[-1] if batch else parent
        assert answered is not None
        kind, plan = await self._plan(work.session, answered)
        if work.window is not None:
            plan.window = self.history.summaries.window_of(work.window)
        session_id = plan.session_id
        turn.start(plan.ref)
        logs.DIRECTORY.set(plan.directory)
        await kind.prepare(plan)
        recorder, start = await self._open(kind, plan, batch, turn)
        if signal.fired and signal.reason == "abort":
            # Aborted before it began: the prompt still gets its reply, marked aborted, as when the
            # abort comes a moment later (and as in OpenCode, which makes the reply first).
            await self._fail(recorder, turn, ABORTED)
            raise Aborted("abort")
        try:
            provider, model = self.infra.registry.resolve(plan.directory, plan.ref)
            settings = self.inputs.admission.agents.get(plan.directory, plan.agent).tuning()
        except (ModelNotFoundError, ConfigError) as exc:  # a config error: opencode.json changed since admission
            await self._fail(recorder, turn, {"name": "UnknownError", "data": {"message": str(exc)}})
            return False
        tuning = tune(model, settings, plan.variant, session_id).request_fields()
        request = await kind.request(plan, model, tuning, last_step)

        def first_event() -> None:
            turn.first_event()
            kind.answering(plan, request)

        try:
            try:
                with tracing.span("model.call", provider=plan.ref.provider_id, model=plan.ref.model_id):
                    finish, calls, parts = await self._stream_with_retries(
                        session_id, recorder, provider, request, signal, first_event
                    )
            finally:
                slot.release()  # the tools run without it
            await kind.streamed(plan, recorder)
            outcome = await self.toolcalls.run(plan.session, recorder, calls, parts, turn.tools, signal)
        except Aborted as exc:
            if exc.reason == "abort":
                await self._fail(recorder, turn, ABORTED)
            else:
                await recorder.save_partial()
            raise
        except ProviderError as exc:
            await self._fail(recorder, turn, exc.to_named_error())
            return False
        except Conflict as exc:
            await self._fail(recorder, turn, {"name": "UnknownError", "data": {"message": exc.message}})
            return False
        more = outcome.called and not outcome.blocked and not last_step
        usage = await self._finish(kind, plan, recorder, turn, finish, model, start, outcome.called, more)
        await kind.after(plan, usage, model)
        return more

    async def _plan(self, session: Session, answered: InputRow) -> tuple[StepKind, StepPlan]:
        """Which kind of step answers ``answered``'s prompt, with which model, into which reply
        (``session`` as the step's first read found it)."""
        session_id = session["id"]
        prompt = StoredPrompt.from_json(answered.prompt)
        kind: StepKind = self._compaction_step if prompt.compaction is not None else self._model_step
        ref, variant = prompt.model_ref, prompt.variant
        agent = kind.agent(prompt)
        directory = session["directory"]
        info: AssistantMessage = {
            "id": ids.message_id(),
            "sessionID": session_id,
            "role": "assistant",
            "time": {"created": now_ms()},
            "parentID": answered.id,
            "modelID": ref.model_id,
            "providerID": ref.provider_id,
            "mode": agent,
            "agent": agent,
            "path": {"cwd": directory, "root": directory},
            "cost": 0,
            "tokens": zero_tokens(),
        }
        if variant:
            info["variant"] = variant
        return kind, StepPlan(session, answered, prompt, ref, variant, agent, info)

    async def _open(
        self, kind: StepKind, plan: StepPlan, batch: list[InputRow], turn: Turn
    ) -> tuple[AssistantRecorder, str | None]:
        """Promote the inputs the step answers and open its reply, in one transaction: the step's
        first (``AssistantRecorder.open_later``), unless the step reads what it writes (a V2
        prompt's user message, written as it is promoted) or its kind opens at once. Returns the
        reply's recorder and the tree the step starts from."""
        recorder = turn.recorder = AssistantRecorder(
            self.infra.log, plan.info, plan.directory, self.infra.settings.part_flush_seconds
        )
        turn.inputs += [row.id for row in batch]
        plan.entering = frozenset(row.id for row in batch)
        start = turn.last_tree or await self.snapshots.track(plan.directory)
        turn.first = turn.first or start

        async def opening(tx: Transaction) -> None:
            await self._promote(tx, plan.session, batch)
            await recorder.begin(tx, start)
            await kind.opened(tx, plan)

        recorder.open_later(opening, self.infra.settings.step_opening_grace_seconds)
        deferred = any(StoredPrompt.from_json(row.prompt).deferred for row in batch)
        if kind.opens_at_once or deferred:
            await recorder.open_now()
        if deferred:
            plan.window = None  # read before the prompts' own messages were written, just now
        return recorder, start

    async def _finish(
        self,
        kind: StepKind,
        plan: StepPlan,
        recorder: AssistantRecorder,
        turn: Turn,
        finish: Finish,
        model: ModelInfo,
        start: str | None,
        ran_tools: bool,
        more: bool,
    ) -> dict[str, Any]:
        """Close the step in one transaction: its usage added to the session's, the turn's
        inputs settled when it is the last step. Returns the step's usage (tokens and cost)."""
        end, changed = await self._step_changes(plan.directory, start, ran_tools)
        turn.last_tree = end
        with tracing.span("commit"):
            async with recorder.transaction() as tx:
                usage = await recorder.finish_step(tx, finish, model, end, changed)
                metrics.RECORDER.model_usage(plan.ref.provider_id, plan.ref.model_id, usage_of(usage))
                await recorder.complete(tx, [] if more else turn.inputs)
                also = kind.ending(tx, plan)

                def change(info: Session) -> None:
                    _add_usage(info, usage)
                    if also is not None:
                        also(info)

                await self.sessions.service.mutate(tx, plan.session_id, change)
                await kind.closed(tx, plan)
        if not more:
            turn.reply = recorder.info["id"]
        if changed and end:
            session = await self.sessions.service.get(plan.session_id)
            await self.history.diffs.after_step(session, plan.answered.id, turn.first, end)
        return usage

    @property
    def snapshots(self) -> FileSnapshots:
        return self.history.diffs.files

    async def _step_changes(self, directory: str, start: str | None, ran_tools: bool) -> tuple[str | None, list[str]]:
        """The tree a step ended with and the files it changed. A step that ran no tool changed
        nothing of ours, so it ends where it started (no second snapshot, and a file someone
        else edits meanwhile is never counted as the session's)."""
        if start is None or not ran_tools:
            return start, []
        end = await self.snapshots.track(directory) or start
        return end, await self.snapshots.changed(directory, start, end)

    async def _stream_with_retries(
        self,
        session_id: str,
        recorder: AssistantRecorder,
        provider: Provider,
        request: ChatRequest,
        signal: AbortSignal,
        first_event: Callable[[], None],
    ) -> tuple[Finish, list[ToolCall], dict[str, dict[str, Any]]]:
        attempt = 0
        while True:
            request.attempt = attempt + 1
            try:
                return await self._stream_once(recorder, provider, request, signal, first_event)
            except ProviderError as exc:
                attempt += 1
                if not is_retryable(exc) or attempt > MAX_RETRIES:
                    raise
                delay = retry_delay_ms(exc, attempt)
                async with recorder.transaction() as tx:
                    await recorder.end_part(tx)  # the retry streams into new parts, as in OpenCode
                    await tx.emit(
                        "session.next.retried",
                        next_event(session_id, attempt=attempt, error=exc.to_named_error()["data"]),
                        session_id=session_id,
                        directory=recorder.directory,
                    )
                self.sessions.coordinator.set_status(
                    session_id,
                    {"type": "retry", "attempt": attempt, "message": status_message(exc), "next": now_ms() + delay},
                )
                await signal.sleep(delay / 1000)
                self.sessions.coordinator.set_status(session_id, BUSY)

    @staticmethod
    async def _stream_once(
        recorder: AssistantRecorder,
        provider: Provider,
        request: ChatRequest,
        signal: AbortSignal,
        first_event: Callable[[], None] = lambda: None,
    ) -> tuple[Finish, list[ToolCall], dict[str, dict[str, Any]]]:
        """Stream one model call into the message; returns its finish, the tool calls it made and
        the pending parts already opened for them (``first_event`` is called once one came)."""
        stream = provider.stream(request).__aiter__()
        calls: list[ToolCall] = []
        parts: dict[str, dict[str, Any]] = {}
        count = 0
        try:
            while True:
                count += 1
                if count % STREAM_EVENTS_PER_PASS == 0:
                    await asyncio.sleep(0)
                try:
                    event = await signal.race(stream.__anext__())
                except StopAsyncIteration:
                    return Finish("unknown"), calls, parts
                if count == 1:
                    first_event()
                if isinstance(event, TextDelta):
                    await recorder.delta("text", event.text)
                elif isinstance(event, ReasoningDelta):
                    await recorder.delta("reasoning", event.text, new_part=event.starts_part)
                elif isinstance(event, ToolInputStart):
                    parts[event.call_id] = await recorder.tool_pending(event.call_id, event.name)
                elif isinstance(event, ToolCall):
                    calls.append(event)
                else:
                    return event, calls, parts
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _fail(self, recorder: AssistantRecorder, turn: Turn, error: dict[str, Any]) -> None:
        """End the step with ``error``, settling the turn's inputs; the files its tools changed
        before it ended are still recorded (an aborted bash may have written half its output),
        so undo reaches them."""
        turn.error = error["name"]
        end, changed = await self._step_changes(recorder.directory, recorder.start_tree, recorder.ran_tools())
        async with recorder.transaction() as tx:
            await recorder.add_patch(tx, changed)
            props = {"sessionID": recorder.session_id, "error": error}
            tx.publish(Event("session.error", props, recorder.session_id, recorder.directory))
            await recorder.complete(tx, turn.inputs, error)
        turn.reply = recorder.info["id"]
        if changed and end:
            session = await self.sessions.service.get(recorder.session_id)
            await self.history.diffs.after_step(session, recorder.info["parentID"], turn.first, end)


def _parked(row: InputRow) -> bool:
    """A V2 prompt no turn has taken yet: admitted, but not in the history."""
    return row.promoted_seq is None and StoredPrompt.from_json(row.prompt).deferred
