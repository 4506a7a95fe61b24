"""The event record shared by the durable log, the live bus and every stream encoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app import ids
from app.clock import now_ms
from app.jsonutil import dumpb, loads

# Durable event types whose payload shape has a version other than 1 (as OpenCode numbers them).
VERSIONS = {"session.next.step.ended": 2, "session.next.step.failed": 2}


@dataclass(slots=True)
class Event:
    """One thing that happened.

    ``durable`` events are rows in the log with a per-session ``seq`` and a whole-server
    ``cursor`` (the row id). Ephemeral events (deltas, status) carry the cursor of the last
    durable event published before them, so a client resuming from any frame's id misses no
    durable event.
    """

    type: str
    props: dict[str, Any] | None  # parsed payload; None until needed when ``raw`` is given
    session_id: str | None = None
    directory: str | None = None
    durable: bool = False
    seq: int | None = None
    cursor: int = 0
    id: str = field(default_factory=ids.event_id)
    time: int = field(default_factory=now_ms)
    raw: str | None = None  # the payload as stored JSON text (events read back from the log)
    _frames: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def properties(self) -> dict[str, Any]:
        """The payload. Replayed events parse their stored JSON only if someone looks inside."""
        if self.props is None:
            self.props = loads(self.raw or "{}")
        return self.props

    def properties_json(self) -> bytes:
        """The payload as JSON bytes: the stored text when there is one (no decode/encode)."""
        return self.raw.encode() if self.raw is not None else dumpb(self.props)

    @property
    def version(self) -> int:
        return VERSIONS.get(self.type, 1)

    @property
    def is_next(self) -> bool:
        """A V2 ``session.next.*`` event (legacy streams leave these out)."""
        return self.type.startswith("session.next.")

    def encoded(self, kind: str, encode: Any) -> bytes:
        """Encode once per stream kind and share the bytes between all subscribers."""
        frame = self._frames.get(kind)
        if frame is None:
            frame = self._frames[kind] = encode(self)
        return frame
