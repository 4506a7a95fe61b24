"""Streamed text deltas that can be delivered as one: what identifies a delta's target, and the
single delta that stands for several.

A client appends each delta's text to the field it names, so consecutive deltas of one target
concatenated give the client the same text in fewer frames. The bus merges them only for a
subscriber that is behind (app/events/bus.py).
"""

from __future__ import annotations

from typing import Any

from app.events.model import Event

# Legacy ``message.part.delta`` ({sessionID, messageID, partID, field, delta}) and the V2 text and
# reasoning deltas ({timestamp, sessionID, assistantMessageID, textID|reasoningID, delta}).
DELTA_TYPES = frozenset({"message.part.delta", "session.next.text.delta", "session.next.reasoning.delta"})
_VARYING = frozenset({"delta", "timestamp"})  # what differs between deltas of one target

DeltaKey = tuple[str, tuple[tuple[str, Any], ...]]


def is_delta(event: Event) -> bool:
    return event.type in DELTA_TYPES and not event.durable


def target(event: Event) -> DeltaKey:
    """The delta's type and every field but its text and timestamp: equal keys, same target."""
    return event.type, tuple((k, v) for k, v in event.properties.items() if k not in _VARYING)


def merged(events: list[Event]) -> Event:
    """One delta with the texts of ``events`` (same target, in order) concatenated; it is the last
    one otherwise (id, cursor, timestamp), so its frame's id is the last delta's."""
    last = events[-1]
    props = dict(last.properties, delta="".join(e.properties["delta"] for e in events))
    return Event(
        last.type,
        props,
        session_id=last.session_id,
        directory=last.directory,
        cursor=last.cursor,
        id=last.id,
        time=last.time,
    )
