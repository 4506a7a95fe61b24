"""Compaction: replace the model's view of a long history with a summary, without rewriting the
history anyone lists.

- A summary covers every message that entered the session up to a log
  position (``through_seq``) and a ``version``; writing one states the version it replaces, so a
  stale writer gets a Conflict instead of overwriting a newer summary.
- The model's context ("window") is the newest summary plus the messages after its
  position, minus compaction bookkeeping (the request and the summary reply). Reading it costs
  the tail, not the whole history.
- Auto-compaction triggers when a step's tokens reach the model's usable context, as in OpenCode:
  ``context limit - min(20 000, output limit)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.clock import now_ms
from app.events.log import EventLog
from app.jsonutil import dumps
from app.providers.base import ModelInfo
from app.runtime.errors import Conflict
from app.runtime.history._context import tool_result
from app.store import summaries
from app.store.queries import Queries, WindowRows
from app.wire import MessageWithParts

SUMMARY_SYSTEM = (
    "You are summarizing a conversation between a user and a coding agent so that the work can "
    "continue from the summary alone. Keep decisions, facts, file names, open questions and next "
    "steps; drop pleasantries. Reply with the summary only."
)
SUMMARY_INSTRUCTION = "Summarize the conversation above."
RESERVED_OUTPUT_CAP = 20_000
TOOL_OUTPUT_LIMIT = 2_000  # per tool result in a summary transcript, as OpenCode truncates them


@dataclass(frozen=True, slots=True)
class Summary:
    """A compaction's summary of every message that entered the session up to ``through_seq``."""

    session_id: str
    version: int
    through_seq: int
    message_id: str
    reason: str
    text: str
    time_created: int


@dataclass(frozen=True, slots=True)
class Window:
    """What the model sees next: the newest summary (if any) and the messages after it, less the
    prompts admitted but not yet promoted into a step (``waiting``: their ids)."""

    summary: Summary | None
    tail: list[MessageWithParts]
    waiting: frozenset[str] = frozenset()

    @property
    def version(self) -> int:
        return self.summary.version if self.summary else 0


def is_bookkeeping(message: MessageWithParts) -> bool:
    """A compaction request or a summary reply: history for people, not context for the model."""
    info = message["info"]
    return bool(info.get("summary")) or any(p["type"] == "compaction" for p in message["parts"])


def usable_context(model: ModelInfo) -> int:
    if model.context_limit <= 0:
        return 0
    return model.context_limit - min(RESERVED_OUTPUT_CAP, model.output_limit)


def overflows(tokens: dict[str, Any], model: ModelInfo) -> bool:
    usable = usable_context(model)
    return usable > 0 and tokens.get("total", 0) >= usable


def transcript(window: Window) -> str:
    """The window as plain text, for the summarizing model."""
    lines = []
    if window.summary:
        lines.append(f"[Summary of earlier conversation]\n{window.summary.text}")
    for message in window.tail:
        role = "User" if message["info"]["role"] == "user" else "Assistant"
        text = "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")
        if text:
            lines.append(f"[{role}]\n{text}")
        for part in message["parts"]:
            if part["type"] == "tool":
                lines.append(f"[Assistant tool call] {part['tool']} {dumps(part['state'].get('input') or {})}")
                lines.append(f"[Tool result]\n{tool_result(part)[:TOOL_OUTPUT_LIMIT]}")
    return "<conversation>\n" + "\n\n".join(lines) + "\n</conversation>"


class Summaries:
    def __init__(self, log: EventLog, queries: Queries) -> None:
        self.log = log
        self.queries = queries

    async def latest(self, session_id: str) -> Summary | None:
        row = await self.queries.latest_summary(session_id)
        return Summary(*row) if row else None

    async def window(self, session_id: str) -> Window:
        return self.window_of(await self.queries.window(session_id))

    @staticmethod
    def window_of(rows: WindowRows) -> Window:
        """The window as read (``Queries.window``, or with a step's work)."""
        row, tail, waiting = rows
        summary = Summary(*row) if row else None
        return Window(summary, [m for m in tail if not is_bookkeeping(m)], frozenset(waiting))

    async def write(
        self, session_id: str, *, replaces: int, through_seq: int, message_id: str, reason: str, summary: str
    ) -> Summary:
        """Store a new summary over version ``replaces``; Conflict if another writer got there
        first (checked inside the write transaction, so exactly one of two racing writers wins)."""
        written = Summary(session_id, replaces + 1, through_seq, message_id, reason, summary, now_ms())
        async with self.log.transaction(hold=session_id) as tx:  # a drain's checks its lease too
            scope = tx.scope
            current = await summaries.latest_version(scope, session_id)
            if current != replaces:
                raise Conflict(f"The summary of {session_id} is at version {current}, not {replaces}", session_id)
            summaries.insert(
                scope,
                session_id=written.session_id,
                version=written.version,
                through_seq=written.through_seq,
                message_id=written.message_id,
                reason=written.reason,
                summary=written.text,
                time_created=written.time_created,
            )
        return written
