"""How a reply that nothing will finish is closed: the one rule for recovery after a stop and for
copies of a history taken while a turn ran (fork, import).

A closed reply looks as an abort leaves one: the message completed with an error, its text and
reasoning ended with the text they hold, its pending or running tool calls failed with "Tool
execution aborted" (``metadata.interrupted``): their side effects are unknown, so they are never
re-run. Nothing closed here looks busy to a client again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Text found in the stored JSON of a reply that may be open (an info without it is: a completed
# one has the key) and of a tool part that may be, so a copy decodes only those.
OPEN_REPLY_HINT = '"completed":'
OPEN_TOOL_HINTS = ('"status":"pending"', '"status":"running"')


def open_reply(info: Mapping[str, Any]) -> bool:
    """Whether a message is a reply never completed."""
    time = info.get("time")
    return info.get("role") == "assistant" and isinstance(time, dict) and "completed" not in time


def closed_part(part: Mapping[str, Any], at: int) -> dict[str, Any] | None:
    """The part closed at ``at``, or None when it is not open (or not shaped as a part can be
    closed: an imported file may hold anything beside ``id`` and ``type``)."""
    kind, time, state = part.get("type"), part.get("time"), part.get("state")
    if kind in ("text", "reasoning") and isinstance(time, dict) and "end" not in time:
        return {**part, "time": {**time, "end": at}}
    if kind == "tool" and isinstance(state, dict) and state.get("status") in ("pending", "running"):
        began = state.get("time")
        start = began.get("start", at) if isinstance(began, dict) else at
        return {
            **part,
            "state": {
                "status": "error",
                "input": state.get("input", {}),
                "error": "Tool execution aborted",
                "metadata": {"interrupted": True},
                "time": {"start": start, "end": at},
            },
        }
    return None


def closed_reply(info: Mapping[str, Any], error: dict[str, Any], at: int) -> dict[str, Any]:
    """The reply's info completed at ``at`` with ``error`` (a MessageAbortedError)."""
    return {**info, "error": error, "time": {**info["time"], "completed": at}}
