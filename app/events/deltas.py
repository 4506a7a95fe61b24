"""Streamed text deltas that can be delivered as one: what identifies a delta's target, and the
single delta that stands for several.

A client appends each delta's text to the field it names, so consecutive deltas of one target
concatenated give the client the same text in fewer frames. A feed merges the deltas of what it
hands out together, and a stream that is behind those of what it takes at once
(app/events/feed.py). A delta joins an earlier one of its target when only deltas of other targets
lie between them: those are ephemeral and for other parts or the other protocol's view of the
part, which no client orders against this one; and as nothing durable lies between, the merged
frame may carry the last delta's id.
"""

from __future__ import annotations

from typing import Any

from app.events.model import Event

# Legacy ``message.part.delta`` ({sessionID, messageID, partID, field, delta}) and the V2 text and
# reasoning deltas ({timestamp, sessionID, assistantMessageID, textID|reasoningID, delta}).
DELTA_TYPES = frozenset({"message.part.delta", "session.next.text.delta", "session.next.reasoning.delta"})
_VARYING = frozenset({"delta", "timestamp"})  # what differs between deltas of one target
LOOKBACK = 4  # deltas of other targets a delta may pass over to join its own

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


def coalesce(events: list[Event]) -> list[Event]:
    """``events`` with each delta joined to an earlier delta of its target among the last
    ``LOOKBACK`` deltas before it (never past another event); the others as they are."""
    out: list[Event] = []
    keys: list[DeltaKey | None] = []  # each entry's target, None for an event that is no delta
    runs: dict[int, list[Event]] = {}  # index in ``out`` -> the deltas merged there
    for event in events:
        key = target(event) if is_delta(event) else None
        if key is not None:
            index = _earlier(key, keys)
            if index is not None:
                runs.setdefault(index, [out[index]]).append(event)
                continue
        out.append(event)
        keys.append(key)
    for index, run in runs.items():
        out[index] = merged(run)
    return out


def _earlier(key: DeltaKey, keys: list[DeltaKey | None]) -> int | None:
    """Where among the last ``LOOKBACK`` entries, all deltas, one of target ``key`` is."""
    for index in range(len(keys) - 1, max(-1, len(keys) - 1 - LOOKBACK), -1):
        if keys[index] is None:
            return None
        if keys[index] == key:
            return index
    return None
