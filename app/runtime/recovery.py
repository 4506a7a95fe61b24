"""Start-up recovery after a crash (``kill -9``, power loss, OOM).

Whatever was admitted is still in ``inputs``. For each session with unsettled inputs: every
assistant message left open is closed with an error (open text parts are ended, tool calls left
pending or running become errors: their side effects are unknown, so they are never re-run), and
the session is woken so its unanswered prompts, including the interrupted one, are answered.
"""

from __future__ import annotations

import logging
from typing import Any

from app.clock import now_ms
from app.events.log import EventLog
from app.runtime.coordinator import DrainCoordinator
from app.runtime.errors import SessionNotFound
from app.runtime.sessions import SessionService
from app.store.queries import Queries

log = logging.getLogger("opensession.recovery")

INTERRUPTED = {"name": "MessageAbortedError", "data": {"message": "Interrupted: the server stopped during this turn"}}


def _closed_part(part: dict[str, Any], at: int) -> dict[str, Any] | None:
    if part["type"] in ("text", "reasoning") and "end" not in part.get("time", {"end": 0}):
        return {**part, "time": {**part["time"], "end": at}}
    state = part.get("state") or {}
    if part["type"] == "tool" and state.get("status") in ("pending", "running"):
        start = (state.get("time") or {}).get("start", at)
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


async def recover(log_: EventLog, queries: Queries, sessions: SessionService, coordinator: DrainCoordinator) -> int:
    """Close what a crash left open and wake sessions with pending work; returns sessions woken."""
    session_ids = await queries.sessions_with_unsettled_inputs()
    for session_id in session_ids:
        try:
            info = await sessions.get(session_id)
        except SessionNotFound:
            continue
        directory = info["directory"]
        at = now_ms()
        async with log_.transaction() as tx:
            for message in await queries.messages(session_id):
                msg = message["info"]
                if msg["role"] != "assistant" or "completed" in msg["time"]:
                    continue
                for part in message["parts"]:
                    closed = _closed_part(part, at)
                    if closed is not None:
                        await tx.emit(
                            "message.part.updated",
                            {"sessionID": session_id, "part": closed, "time": at},
                            session_id=session_id,
                            directory=directory,
                        )
                msg = {**msg, "error": INTERRUPTED, "time": {**msg["time"], "completed": at}}
                await tx.emit(
                    "message.updated",
                    {"sessionID": session_id, "info": msg},
                    session_id=session_id,
                    directory=directory,
                )
        coordinator.wake(session_id)
    if session_ids:
        log.info("recovered %d session(s) with unanswered prompts", len(session_ids))
    return len(session_ids)
