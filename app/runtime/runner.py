"""The drain loop: take the session's oldest unsettled input, run its turn against the model,
settle it, repeat until nothing is pending.

A turn: promote the input (an assistant message answering it), stream the model into that
message, retry retryable provider failures per OpenCode's policy (status ``retry`` meanwhile),
and settle. An abort keeps the partial text, ends the message with ``MessageAbortedError`` and
settles the inputs that were waiting behind it; a shutdown settles nothing, so the next start
recovers the work.
"""

from __future__ import annotations

from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog
from app.jsonutil import loads
from app.providers.base import ChatRequest, Finish, Provider, ProviderError, ReasoningDelta, TextDelta
from app.providers.registry import ModelNotFoundError, ModelRef, ProviderRegistry
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.context import chat_messages, system_prompts
from app.runtime.coordinator import DrainCoordinator
from app.runtime.recorder import ABORTED, AssistantRecorder
from app.runtime.retry import MAX_RETRIES, is_retryable, retry_delay_ms, status_message
from app.runtime.sessions import SessionService
from app.runtime.title import TitleGenerator
from app.runtime.waiters import InputWaiters
from app.store import sql
from app.store.queries import InputRow, Queries


def _add_usage(totals: dict[str, Any], step: dict[str, Any]) -> None:
    totals["cost"] = totals.get("cost", 0) + step["cost"]
    tokens = totals.setdefault("tokens", {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}})
    for key in ("input", "output", "reasoning"):
        tokens[key] = tokens.get(key, 0) + step["tokens"][key]
    for key in ("read", "write"):
        tokens["cache"][key] = tokens["cache"].get(key, 0) + step["tokens"]["cache"][key]


class Runner:
    def __init__(
        self,
        log: EventLog,
        queries: Queries,
        sessions: SessionService,
        registry: ProviderRegistry,
        titles: TitleGenerator,
        waiters: InputWaiters,
        flush_seconds: float,
    ) -> None:
        self.log = log
        self.queries = queries
        self.sessions = sessions
        self.registry = registry
        self.titles = titles
        self.waiters = waiters
        self.flush_seconds = flush_seconds
        self.coordinator: DrainCoordinator  # set by the runtime (they refer to each other)

    async def drain(self, session_id: str, signal: AbortSignal) -> None:
        try:
            while (row := await self.queries.next_input(session_id)) is not None:
                signal.check()
                await self._turn(session_id, row, signal)
                self.waiters.settle(row.id)
        except Aborted as exc:
            if exc.reason == "abort":
                await self._settle_waiting(session_id)
            raise

    async def _settle_waiting(self, session_id: str) -> None:
        """An abort stops the whole busy period: inputs queued behind the aborted turn stay in the
        history as user messages but are not answered (as in OpenCode)."""
        async with self.log.db.write() as scope:
            scope.execute(sql.COMPLETE_SESSION_INPUTS, {"session_id": session_id})
        self.waiters.settle_session(session_id)

    async def _turn(self, session_id: str, row: InputRow, signal: AbortSignal) -> None:
        session = await self.sessions.get(session_id)
        directory = session["directory"]
        prompt = loads(row.prompt)
        ref = ModelRef(prompt["model"]["providerID"], prompt["model"]["modelID"])
        agent = prompt.get("agent") or "build"
        info: dict[str, Any] = {
            "id": ids.message_id(),
            "sessionID": session_id,
            "role": "assistant",
            "time": {"created": now_ms()},
            "parentID": row.id,
            "modelID": ref.model_id,
            "providerID": ref.provider_id,
            "mode": agent,
            "agent": agent,
            "path": {"cwd": directory, "root": directory},
            "cost": 0,
            "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        }
        history = await self.queries.messages(session_id)
        messages = chat_messages(history, await self.queries.queued_user_ids(session_id) - {row.id})
        recorder = AssistantRecorder(self.log, info, directory, self.flush_seconds)
        async with self.log.transaction() as tx:
            await recorder.begin(tx, row.id)
        try:
            provider, model = self.registry.resolve(directory, ref)
        except ModelNotFoundError as exc:
            await self._fail(recorder, row.id, {"name": "UnknownError", "data": {"message": str(exc)}})
            return
        request = ChatRequest(
            model=model,
            system=system_prompts(directory, prompt.get("system")),
            messages=messages,
            session_id=session_id,
        )
        try:
            finish = await self._stream_with_retries(session_id, recorder, provider, request, signal)
        except Aborted as exc:
            if exc.reason == "abort":
                await self._fail(recorder, row.id, ABORTED)
            raise
        except ProviderError as exc:
            await self._fail(recorder, row.id, exc.to_named_error())
            return
        async with self.log.transaction() as tx:
            usage = await recorder.finish_step(tx, finish, model)
            await recorder.complete(tx, row.id)
            await self.sessions.mutate(tx, session_id, lambda s: _add_usage(s, usage))
        if not any(m["info"]["role"] == "assistant" for m in history) and messages:
            # After the answer rather than beside it: the title is not worth delaying the reply.
            self.titles.schedule(session, messages[-1]["content"], provider, model)

    async def _stream_with_retries(
        self,
        session_id: str,
        recorder: AssistantRecorder,
        provider: Provider,
        request: ChatRequest,
        signal: AbortSignal,
    ) -> Finish:
        attempt = 0
        while True:
            request.attempt = attempt + 1
            try:
                return await self._stream_once(recorder, provider, request, signal)
            except ProviderError as exc:
                attempt += 1
                if not is_retryable(exc) or attempt > MAX_RETRIES:
                    raise
                delay = retry_delay_ms(exc, attempt)
                await self.coordinator.set_status(
                    session_id,
                    {"type": "retry", "attempt": attempt, "message": status_message(exc), "next": now_ms() + delay},
                )
                await signal.sleep(delay / 1000)
                await self.coordinator.set_status(session_id, {"type": "busy"})

    @staticmethod
    async def _stream_once(
        recorder: AssistantRecorder, provider: Provider, request: ChatRequest, signal: AbortSignal
    ) -> Finish:
        stream = provider.stream(request).__aiter__()
        try:
            while True:
                try:
                    event = await signal.race(stream.__anext__())
                except StopAsyncIteration:
                    return Finish("unknown")
                if isinstance(event, TextDelta):
                    await recorder.delta("text", event.text)
                elif isinstance(event, ReasoningDelta):
                    await recorder.delta("reasoning", event.text)
                else:
                    return event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _fail(self, recorder: AssistantRecorder, input_id: str, error: dict[str, Any]) -> None:
        async with self.log.transaction() as tx:
            tx.publish(
                "session.error",
                {"sessionID": recorder.session_id, "error": error},
                session_id=recorder.session_id,
                directory=recorder.directory,
            )
            await recorder.complete(tx, input_id, error)
