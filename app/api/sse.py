"""SSE plumbing shared by every event stream: subscribe first, replay the durable log from the
client's position, then go live, dropping live duplicates of what the replay already sent. So a
stream is gap-free and duplicate-free across the replay/live boundary.

Every event frame carries ``id: <position>`` (the whole-server cursor, or the session's ``seq``
on a per-session stream), so a client that reconnects with ``Last-Event-ID`` receives every
durable event it missed. Ephemeral events (deltas) are not replayed; the final part event
carries the whole text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent

from app.events.bus import Accept, Overflowed
from app.events.model import Event
from app.runtime.errors import InvalidInput
from app.runtime.service import Runtime

SSE_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
    "X-Content-Type-Options": "nosniff",
}
REPLAY_BATCH = 1000

Encode = Callable[[Event], bytes]  # b"" means: no frame for this event on this stream
Replay = Callable[[int], Awaitable[list[Event]]]  # durable events after a position, one batch


def sse(data: bytes, frame_id: int | None) -> ServerSentEvent:
    # sse-starlette's per-response ``sep`` does not reach ServerSentEvent objects; OpenCode (and
    # the official SDK's parser) use bare "\n" line endings.
    return ServerSentEvent(data=data.decode(), id=None if frame_id is None else str(frame_id), sep="\n")


def comment(text: str) -> ServerSentEvent:
    return ServerSentEvent(comment=text, sep="\n")


def resume_position(last_event_id: str | None) -> int | None:
    """The position a reconnecting client resumes from (its ``Last-Event-ID``), if it sent one."""
    if last_event_id is None or last_event_id == "":
        return None
    try:
        position = int(last_event_id)
    except ValueError:
        position = -1
    if position < 0:
        raise InvalidInput("Last-Event-ID must be an event id sent by this server", kind="Headers")
    return position


def global_position(event: Event) -> int:
    """Durable events carry their own cursor; ephemeral ones the cursor of the last durable event
    published before them (set by the bus), so resuming from them misses nothing durable."""
    return event.cursor


def session_position(event: Event) -> int:
    """Per-session streams carry durable events only; their position is the session's seq."""
    return event.seq if event.seq is not None else -1


@dataclass
class StreamSpec:
    accept: Accept
    encode: Encode
    kind: str  # key under which an event caches its encoding for this stream
    position: Callable[[Event], int]
    replay: Replay
    heartbeat: Callable[[], ServerSentEvent]
    connected: Callable[[], ServerSentEvent] | None = None
    twin: Encode | None = None  # a second frame for durable events (/global/event's sync twin)


async def _frames(runtime: Runtime, spec: StreamSpec, after: int | None) -> AsyncIterator[ServerSentEvent]:
    subscription = runtime.bus.subscribe(spec.accept)
    interval = runtime.settings.heartbeat_seconds

    def frames(event: Event) -> list[ServerSentEvent]:
        position = spec.position(event)
        primary = event.encoded(spec.kind, spec.encode)
        result = [sse(primary, position)] if primary else []
        if spec.twin is not None and event.durable:
            result.append(sse(event.encoded(spec.kind + ":sync", spec.twin), position))
        return result

    try:
        if spec.connected is not None:
            yield spec.connected()
        replayed_to = -1
        if after is not None:
            replayed_to = after
            while True:
                batch = await spec.replay(replayed_to)
                for event in batch:
                    replayed_to = spec.position(event)
                    if spec.accept(event):
                        for item in frames(event):
                            yield item
                if len(batch) < REPLAY_BATCH:
                    break
        while True:
            event = await subscription.next(interval)
            if event is None:
                yield spec.heartbeat()
                continue
            if event.durable and spec.position(event) <= replayed_to:
                continue
            for item in frames(event):
                yield item
    except Overflowed:
        return  # the client resumes from the last id it received
    finally:
        subscription.close()


def event_source(runtime: Runtime, spec: StreamSpec, after: int | None) -> EventSourceResponse:
    return EventSourceResponse(_frames(runtime, spec, after), headers=SSE_HEADERS, ping=0, sep="\n")


def envelope(event_type: str, properties: dict[str, Any], event_id: str) -> dict[str, Any]:
    return {"id": event_id, "type": event_type, "properties": properties}
