"""Writes one assistant message as the model streams it, in OpenCode's part order:
step-start, reasoning (optional), text, step-finish, then the finished message.

Deltas are published live but are not events in the log; the streaming part's row is
checkpointed at most every ``flush_seconds`` so a crash keeps nearly all of the partial text,
and the final ``message.part.updated`` carries the complete text (equal to the concatenated
deltas).
"""

from __future__ import annotations

import time
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction
from app.providers.base import Finish, ModelInfo, Usage
from app.store import sql
from app.store.projectors import part_row

ABORTED = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}


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
    return (usage.input * model.cost_input + (usage.output + usage.reasoning) * model.cost_output) / 1_000_000


class _StreamingPart:
    def __init__(self, part: dict[str, Any]) -> None:
        self.part = part
        self.chunks: list[str] = []
        self.last_flush = time.monotonic()

    def snapshot(self, *, final: bool) -> dict[str, Any]:
        self.part["text"] = "".join(self.chunks)
        if final:
            self.part["time"]["end"] = now_ms()
        return dict(self.part)


class AssistantRecorder:
    def __init__(self, log: EventLog, info: dict[str, Any], directory: str, flush_seconds: float) -> None:
        self.log = log
        self.info = info
        self.session_id: str = info["sessionID"]
        self.directory = directory
        self.flush_seconds = flush_seconds
        self._open: _StreamingPart | None = None
        self.parts: list[dict[str, Any]] = []

    async def _emit(self, tx: Transaction, event_type: str, props: dict[str, Any]) -> None:
        await tx.emit(event_type, props, session_id=self.session_id, directory=self.directory)

    async def emit_part(self, tx: Transaction, part: dict[str, Any]) -> None:
        await self._emit(tx, "message.part.updated", {"sessionID": self.session_id, "part": part, "time": now_ms()})

    async def emit_info(self, tx: Transaction) -> None:
        await self._emit(tx, "message.updated", {"sessionID": self.session_id, "info": self.info})

    def _new_part(self, part_type: str, **fields: Any) -> dict[str, Any]:
        part = {"id": ids.part_id(), "sessionID": self.session_id, "messageID": self.info["id"], "type": part_type}
        part.update(fields)
        self.parts.append(part)
        return part

    async def begin(self, tx: Transaction, input_id: str) -> None:
        """Create the message and its step-start, and mark the input promoted into this turn."""
        await self.emit_info(tx)
        tx.execute(sql.PROMOTE_INPUT, {"id": input_id, "promoted_seq": tx.events[-1].seq})
        await self.emit_part(tx, self._new_part("step-start"))

    async def delta(self, kind: str, text: str) -> None:
        """Append streamed ``text`` to the open part of ``kind`` (``text`` or ``reasoning``)."""
        if self._open is None or self._open.part["type"] != kind:
            async with self.log.transaction() as tx:
                await self._close_open(tx)
                self._open = _StreamingPart(self._new_part(kind, text="", time={"start": now_ms()}))
                await self.emit_part(tx, dict(self._open.part))
        stream = self._open
        stream.chunks.append(text)
        self.log.publish(
            "message.part.delta",
            {
                "sessionID": self.session_id,
                "messageID": self.info["id"],
                "partID": stream.part["id"],
                "field": "text",
                "delta": text,
            },
            session_id=self.session_id,
            directory=self.directory,
        )
        if time.monotonic() - stream.last_flush >= self.flush_seconds:
            await self._checkpoint(stream)

    async def _checkpoint(self, stream: _StreamingPart) -> None:
        """Persist the partial text without an event: a crash then loses at most one interval."""
        stream.last_flush = time.monotonic()
        async with self.log.db.write() as scope:
            scope.execute(sql.UPSERT_PART, part_row(stream.snapshot(final=False)))

    async def _close_open(self, tx: Transaction) -> None:
        if self._open is not None:
            await self.emit_part(tx, self._open.snapshot(final=True))
            self._open = None

    async def finish_step(self, tx: Transaction, finish: Finish, model: ModelInfo) -> dict[str, Any]:
        """Close the step: final parts, step-finish with usage, the message's finish and tokens."""
        tokens = tokens_of(finish.usage)
        cost = cost_of(model, finish.usage)
        await self._close_open(tx)
        await self.emit_part(tx, self._new_part("step-finish", reason=finish.reason, cost=cost, tokens=tokens))
        self.info["finish"] = finish.reason
        self.info["tokens"] = tokens
        self.info["cost"] = self.info.get("cost", 0) + cost
        return {"cost": cost, "tokens": tokens}

    async def complete(self, tx: Transaction, input_id: str, error: dict[str, Any] | None = None) -> None:
        """Mark the message completed (with ``error`` if it failed) and settle its input."""
        await self._close_open(tx)
        if error is not None:
            self.info["error"] = error
        self.info["time"]["completed"] = now_ms()
        await self.emit_info(tx)
        tx.execute(sql.COMPLETE_INPUT, {"id": input_id})
