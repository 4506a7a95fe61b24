"""Payload helpers shared by everything that emits ``session.next.*`` (V2) events."""

from __future__ import annotations

from typing import Any

from app.clock import now_ms


def next_event(session_id: str, **fields: Any) -> dict[str, Any]:
    """Payload of a ``session.next.*`` event: every one carries a timestamp and the session id."""
    return {"timestamp": now_ms(), "sessionID": session_id, **fields}
