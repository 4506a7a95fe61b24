"""Writes one assistant message (one step) as the model streams it, in both event families:

- legacy: ``message.updated`` / ``message.part.updated`` in OpenCode's part order (step-start,
  reasoning, text, step-finish) with ``message.part.delta`` deltas;
- V2: ``session.next.step.started``, ``text|reasoning.started/delta/ended``, ``step.ended`` or
  ``step.failed``.

Deltas are published live but are not events in the log; the streaming part's row is
checkpointed at most every ``flush_seconds`` so a crash keeps nearly all of the partial text, and
the final part event carries the complete text (equal to the concatenated deltas).

Opening late (``open_later``): the writes that open a step (its inputs promoted, the message and
its step-start) go with the step's first write of its own (the first part the stream opens, or
its end), or on their own once a grace (``Settings.step_opening_grace_seconds``) has passed
without one. A model that answers at once thus costs one commit less per step, and one that
takes its time still shows its reply begun within the grace. Until the opening commits nothing
of the step is stored: a crash, a lost lease or a lost database before it leaves the inputs
waiting, to be answered as if never begun.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction, Unwanted
from app.events.model import Event
from app.jsonutil import readable
from app.providers.base import Finish, ModelInfo, Usage
from app.providers.models import step_cost
from app.runtime.payloads import next_event
from app.store import inputs
from app.store.projectors import checkpoint_part
from app.wire import AssistantMessage

log = logging.getLogger("opensession.turn")

ABORTED = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}
INTERRUPTED_STEP = "Provider turn interrupted"

Opening = Callable[[Transaction], Awaitable[None]]  # the writes that open a step, in a transaction


def tokens_of(usage: Usage) -> dict[str, Any]:
    total = usage.input + usage.output + usage.reasoning + usage.cache_read + usage.cache_write
    return {
        "total": total,
        "input": usage.input,
        "output": usage.output,
        "reasoning": usage.reasoning,
        "cache": {"read": usage.cache_read, "write": usage.cache_write},
    }


def cost_of(model: ModelInfo, usage: Usage) -> float:
    return step_cost(model, usage)


def _tree_field(tree: str | None) -> dict[str, str]:
    """The wire's ``snapshot`` field (a file snapshot's tree), absent where file snapshots are
    off (as OpenCode omits it)."""
    return {"snapshot": tree} if tree else {}


def error_message(error: dict[str, Any]) -> str:
    return str((error.get("data") or {}).get("message") or error.get("name") or "error")


class _StreamingPart:
    def __init__(self, part: dict[str, Any]) -> None:
        self.part = part
        self.chunks: list[str] = []
        self.last_flush = time.monotonic()

    @property
    def id_field(self) -> str:
        return "textID" if self.part["type"] == "text" else "reasoningID"

    def copy(self, *, final: bool) -> dict[str, Any]:
        """The part as streamed so far (a copy: the stream goes on changing its own)."""
        self.part["text"] = "".join(self.chunks)
        if final:
            self.part["time"]["end"] = now_ms()
        return dict(self.part)


class AssistantRecorder:
    def __init__(self, log: EventLog, info: AssistantMessage, directory: str, flush_seconds: float) -> None:
        self.log = log
        self.info = info
        self.session_id: str = info["sessionID"]
        self.directory = directory
        self.flush_seconds = flush_seconds
        self._open: _StreamingPart | None = None
        self.parts: list[dict[str, Any]] = []
        self._started: dict[str, int] = {}  # tool call id -> when it started running
        self.start_tree: str | None = None  # the file snapshot the step started from
        self._step_start: dict[str, Any] | None = None
        # Writes that open the step, not yet committed (``open_later``), and the timer that
        # commits them alone after the grace.
        self._opening: Opening | None = None
        self._opening_timer: asyncio.TimerHandle | None = None
        self._opening_alone: asyncio.Task[None] | None = None

    # -- the step's opening ------------------------------------------------------------------------

    def open_later(self, opening: Opening, grace: float) -> None:
        """Make ``opening`` part of the step's first transaction (``transaction``), or commit it
        alone after ``grace`` seconds. The caller ends it with ``stop_opening``."""
        self._opening = opening
        self._opening_timer = asyncio.get_running_loop().call_later(grace, self._open_alone)

    def _open_alone(self) -> None:
        self._opening_timer = None
        if self._opening is not None:
            self._opening_alone = asyncio.create_task(self._commit_opening(), name=f"opening:{self.info['id']}")

    async def _commit_opening(self) -> None:
        try:
            await self.open_now()
        except Exception as exc:  # the step's next write makes it, or meets the same failure
            log.debug("the opening of %s waits for the step's next write: %s", self.info["id"], exc)

    async def open_now(self) -> None:
        """Commit the step's opening now, if it is still to be made (when its turn comes: the
        step's first transaction may have made it while this one waited)."""
        if self._opening is not None:
            with suppress(Unwanted):
                async with self.transaction(wanted=lambda: self._opening is not None):
                    pass

    async def stop_opening(self) -> None:
        """The step is over: an opening not made by now never is (its step failed before writing
        anything: its inputs wait for the next drain)."""
        self._opening = None
        if self._opening_timer is not None:
            self._opening_timer.cancel()
            self._opening_timer = None
        alone, self._opening_alone = self._opening_alone, None
        if alone is not None:
            await asyncio.gather(alone, return_exceptions=True)

    @asynccontextmanager
    async def transaction(
        self, *, urgent: bool = False, at_once: bool = False, wanted: Callable[[], bool] | None = None
    ) -> AsyncIterator[Transaction]:
        """A transaction of the step's: its opening comes first in it if not committed yet (and
        waits for the next one if this one fails)."""
        opening: Opening | None = None
        made = False

        def committed() -> None:
            nonlocal made
            made = True

        try:
            async with self.log.transaction(urgent=urgent, at_once=at_once, wanted=wanted) as tx:
                opening, self._opening = self._opening, None
                if opening is not None:
                    await opening(tx)
                    tx.scope.after_commit(committed)
                yield tx
        except BaseException:
            if opening is not None and not made and self._opening is None:
                self._opening = opening
            raise

    async def _emit(self, tx: Transaction, event_type: str, props: dict[str, Any]) -> None:
        await tx.emit(event_type, props, session_id=self.session_id, directory=self.directory)

    async def _emit_next(self, tx: Transaction, kind: str, **fields: Any) -> None:
        await self._emit(
            tx, f"session.next.{kind}", next_event(self.session_id, assistantMessageID=self.info["id"], **fields)
        )

    def _publish(self, event_type: str, props: dict[str, Any]) -> None:
        self.log.publish(Event(event_type, props, self.session_id, self.directory))

    async def emit_part(self, tx: Transaction, part: dict[str, Any]) -> None:
        await self._emit(tx, "message.part.updated", {"sessionID": self.session_id, "part": part, "time": now_ms()})

    async def emit_info(self, tx: Transaction) -> None:
        await self._emit(tx, "message.updated", {"sessionID": self.session_id, "info": self.info})

    def text(self) -> str:
        """The message's text so far (all text parts, in order)."""
        open_text = "".join(self._open.chunks) if self._open and self._open.part["type"] == "text" else ""
        closed = "".join(
            p.get("text", "")
            for p in self.parts
            if p["type"] == "text" and p is not (self._open.part if self._open else None)
        )
        return closed + open_text

    def _new_part(self, part_type: str, **fields: Any) -> dict[str, Any]:
        part = {"id": ids.part_id(), "sessionID": self.session_id, "messageID": self.info["id"], "type": part_type}
        part.update(fields)
        self.parts.append(part)
        return part

    async def begin(self, tx: Transaction, start_tree: str | None) -> None:
        """Create the message and its step-start (carrying the tree the step starts from)."""
        self.start_tree = start_tree
        if self._step_start is None:  # an opening whose transaction failed is made again
            self._step_start = self._new_part("step-start", **_tree_field(start_tree))
        await self.emit_info(tx)
        await self.emit_part(tx, self._step_start)
        await self._emit_next(
            tx,
            "step.started",
            agent=self.info["agent"],
            model={"id": self.info["modelID"], "providerID": self.info["providerID"]},
            **_tree_field(start_tree),
        )

    def ran_tools(self) -> bool:
        return any(p["type"] == "tool" and p["state"]["status"] != "pending" for p in self.parts)

    async def add_patch(self, tx: Transaction, files: list[str]) -> None:
        """Record the files this step changed (absolute paths), against the tree it started from."""
        if self.start_tree and files:
            await self.emit_part(tx, self._new_part("patch", hash=self.start_tree, files=files))

    async def delta(self, kind: str, text: str, new_part: bool = False) -> None:
        """Append streamed ``text`` to the open part of ``kind`` (``text`` or ``reasoning``), or
        to a new one when ``new_part``."""
        if new_part or self._open is None or self._open.part["type"] != kind:
            # Urgent: the subscribers' first delta waits for this part to be durable, so it does
            # not wait behind admissions (UrgentFirst) as the drain's other writes do. While
            # someone watches the session it commits at once, not with the writes of the rest of
            # the loop pass: a commit of its own costs CPU, waiting costs two loop passes.
            watched = self.log.bus.watched(session=self.session_id, directory=self.directory)
            async with self.transaction(urgent=True, at_once=watched) as tx:
                await self._close_open(tx)
                self._open = _StreamingPart(self._new_part(kind, text="", time={"start": now_ms()}))
                await self.emit_part(tx, dict(self._open.part))
                await self._emit_next(tx, f"{kind}.started", **{self._open.id_field: self._open.part["id"]})
        stream = self._open
        stream.chunks.append(text)
        part_id = stream.part["id"]
        self._publish(
            "message.part.delta",
            {
                "sessionID": self.session_id,
                "messageID": self.info["id"],
                "partID": part_id,
                "field": "text",
                "delta": text,
            },
        )
        self._publish(
            f"session.next.{kind}.delta",
            next_event(self.session_id, assistantMessageID=self.info["id"], **{stream.id_field: part_id}, delta=text),
        )
        if time.monotonic() - stream.last_flush >= self.flush_seconds:
            await self._checkpoint(stream)

    async def save_partial(self) -> None:
        """At shutdown: keep the text streamed so far (the next start closes the message)."""
        if self._open is not None:
            await self._checkpoint(self._open)

    async def _checkpoint(self, stream: _StreamingPart) -> None:
        """Persist the partial text without an event: a crash then loses at most one interval.
        In a transaction of the log's, so a drain that lost its lease (a process frozen past its
        expiry, then thawed) cannot write over the part its successor closed."""
        stream.last_flush = time.monotonic()
        async with self.log.transaction() as tx:
            checkpoint_part(tx.scope, stream.copy(final=False))

    async def end_part(self, tx: Transaction) -> None:
        """End the text or reasoning part being streamed (a failed call's partial text stays as it
        was; what its retry streams goes to new parts)."""
        await self._close_open(tx)

    async def _close_open(self, tx: Transaction) -> None:
        stream, self._open = self._open, None
        if stream is not None:
            final = stream.copy(final=True)
            await self.emit_part(tx, final)
            kind = final["type"]
            await self._emit_next(tx, f"{kind}.ended", **{stream.id_field: final["id"]}, text=final["text"])

    # -- tool calls: pending -> running -> completed | error ---------------------------------------

    async def tool_pending(self, call_id: str, name: str) -> dict[str, Any]:
        async with self.transaction() as tx:
            await self._close_open(tx)
            part = self._new_part(
                "tool", callID=call_id, tool=name, state={"status": "pending", "input": {}, "raw": ""}
            )
            await self.emit_part(tx, dict(part))
            await self._emit_next(tx, "tool.input.started", callID=call_id, name=name)
        return part

    async def _tool_state(self, part: dict[str, Any], state: dict[str, Any], kind: str, **fields: Any) -> None:
        """Record a tool's state. What a tool reports can hold names from the file system that are
        not UTF-8: they are made ``readable``, or the record could not be stored (and the part
        would stay running)."""
        part["state"] = readable(state)
        async with self.transaction() as tx:
            await self.emit_part(tx, dict(part))
            await self._emit_next(tx, kind, callID=part["callID"], **readable(fields))

    async def tool_running(self, part: dict[str, Any], args: dict[str, Any], raw: str) -> None:
        self._started[part["callID"]] = now_ms()
        part["state"] = {"status": "running", "input": args, "time": {"start": self._started[part["callID"]]}}
        async with self.transaction() as tx:
            await self.emit_part(tx, dict(part))
            await self._emit_next(tx, "tool.input.ended", callID=part["callID"], text=raw)
            await self._emit_next(
                tx, "tool.called", callID=part["callID"], tool=part["tool"], input=args, provider={"executed": False}
            )

    async def tool_progress(self, part: dict[str, Any], metadata: dict[str, Any]) -> None:
        state = {**part["state"], "metadata": metadata}
        await self._tool_state(part, state, "tool.progress", structured=metadata, content=[])

    async def tool_completed(
        self,
        part: dict[str, Any],
        output: str,
        title: str,
        metadata: dict[str, Any],
        attachments: list[dict[str, Any]] | None = None,
    ) -> None:
        state: dict[str, Any] = {
            "status": "completed",
            "input": part["state"]["input"],
            "output": output,
            "title": title,
            "metadata": metadata,
            "time": {"start": self._started.pop(part["callID"], now_ms()), "end": now_ms()},
        }
        if attachments:  # file parts of this message, as OpenCode records them
            owner = {"sessionID": self.info["sessionID"], "messageID": self.info["id"]}
            state["attachments"] = [{"id": ids.part_id(), **owner, **a} for a in attachments]
        await self._tool_state(
            part,
            state,
            "tool.success",
            structured=metadata,
            content=[{"type": "text", "text": output}],
            provider={"executed": False},
        )

    async def tool_failed(self, part: dict[str, Any], error: str, metadata: dict[str, Any] | None = None) -> None:
        state: dict[str, Any] = {
            "status": "error",
            "input": part["state"].get("input", {}),
            "error": error,
            "time": {"start": self._started.pop(part["callID"], now_ms()), "end": now_ms()},
        }
        if metadata:
            state["metadata"] = metadata
        await self._tool_state(
            part, state, "tool.failed", error={"type": "unknown", "message": error}, provider={"executed": False}
        )

    async def finish_step(
        self, tx: Transaction, finish: Finish, model: ModelInfo, end_tree: str | None, files: list[str]
    ) -> dict[str, Any]:
        """Close the step: final parts, step-finish with usage and the tree it ended with, the
        patch of the files it changed, the message's finish and tokens."""
        tokens = tokens_of(finish.usage)
        cost = cost_of(model, finish.usage)
        await self._close_open(tx)
        tree = _tree_field(end_tree)
        finished = self._new_part("step-finish", reason=finish.reason, **tree, cost=cost, tokens=tokens)
        await self.emit_part(tx, finished)
        await self.add_patch(tx, files)
        self.info["finish"] = finish.reason
        self.info["tokens"] = tokens
        self.info["cost"] = self.info.get("cost", 0) + cost
        v2_tokens = {k: v for k, v in tokens.items() if k != "total"}
        await self._emit_next(tx, "step.ended", finish=finish.reason, cost=cost, tokens=v2_tokens, **tree, files=files)
        return {"cost": cost, "tokens": tokens}

    async def complete(self, tx: Transaction, input_ids: list[str], error: dict[str, Any] | None = None) -> None:
        """Mark the message completed (with ``error`` if it failed) and settle the inputs it answers."""
        await self._close_open(tx)
        for part in self.parts:  # tool calls cut short by an abort or failure: their effects are unknown
            if part["type"] == "tool" and part["state"]["status"] in ("pending", "running"):
                part["state"] = {
                    "status": "error",
                    "input": part["state"].get("input", {}),
                    "error": "Tool execution aborted",
                    "metadata": {"interrupted": True},
                    "time": {"start": self._started.pop(part["callID"], now_ms()), "end": now_ms()},
                }
                await self.emit_part(tx, dict(part))
        if error is not None:
            self.info["error"] = error
            message = INTERRUPTED_STEP if error is ABORTED else error_message(error)
            await self._emit_next(tx, "step.failed", error={"type": "unknown", "message": message})
        self.info["time"]["completed"] = now_ms()
        await self.emit_info(tx)
        for input_id in input_ids:
            inputs.complete(tx.scope, input_id)
