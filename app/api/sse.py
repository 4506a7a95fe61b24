"""SSE plumbing shared by every event stream: subscribe first, replay the durable log from the
client's cursor, then go live, dropping live duplicates of what the replay already sent.

Every frame carries ``id: <cursor>``. A client that reconnects with ``Last-Event-ID`` therefore
receives every durable event it missed (ephemeral deltas are not replayed; the final
``message.part.updated`` carries the whole text)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent

from app.events.bus import Accept, Overflowed
from app.events.model import Event
from app.runtime.service import Runtime

SSE_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
    "X-Content-Type-Options": "nosniff",
}
REPLAY_BATCH = 1000

Encode = Callable[[Event], bytes]  # b"" means: no frame for this event on this stream
Control = Callable[[str], bytes]  # encodes server.connected / server.heartbeat frames


def _sse(data: bytes, cursor: int) -> ServerSentEvent:
    # sse-starlette's per-response ``sep`` does not reach ServerSentEvent objects; OpenCode (and
    # the official SDK's parser) use bare "\n" line endings.
    return ServerSentEvent(data=data.decode(), id=str(cursor), sep="\n")


def parse_cursor(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    cursor = int(value)
    if cursor < 0:
        raise ValueError("cursor must not be negative")
    return cursor


async def _frames(
    runtime: Runtime,
    accept: Accept,
    kind: str,
    encode: Encode,
    control: Control,
    after: int | None,
    replay_directory: str | None,
    twin: Encode | None,
) -> AsyncIterator[ServerSentEvent]:
    bus = runtime.bus
    subscription = bus.subscribe(accept)
    heartbeat = runtime.settings.heartbeat_seconds

    def frame(event: Event) -> list[ServerSentEvent]:
        primary = event.encoded(kind, encode)
        frames = [_sse(primary, event.cursor)] if primary else []
        if twin is not None and event.durable:
            frames.append(_sse(event.encoded(kind + ":sync", twin), event.cursor))
        return frames

    try:
        yield _sse(control("server.connected"), bus.cursor)
        replayed_to = -1
        if after is not None:
            cursor = after
            while True:
                batch = await runtime.log.since(cursor, limit=REPLAY_BATCH, directory=replay_directory)
                for event in batch:
                    cursor = event.cursor
                    if accept(event):
                        for item in frame(event):
                            yield item
                if len(batch) < REPLAY_BATCH:
                    break
            replayed_to = cursor
        while True:
            event = await subscription.next(heartbeat)
            if event is None:
                yield _sse(control("server.heartbeat"), bus.cursor)
                continue
            if event.durable and event.cursor <= replayed_to:
                continue
            for item in frame(event):
                yield item
    except Overflowed:
        return  # the client resumes from the last id it received
    finally:
        subscription.close()


def event_source(
    runtime: Runtime,
    *,
    accept: Accept,
    kind: str,
    encode: Encode,
    control: Control,
    after: int | None,
    replay_directory: str | None = None,
    twin: Encode | None = None,
) -> EventSourceResponse:
    return EventSourceResponse(
        _frames(runtime, accept, kind, encode, control, after, replay_directory, twin),
        headers=SSE_HEADERS,
        ping=0,
        sep="\n",
    )


def envelope(event_type: str, properties: dict[str, Any], event_id: str) -> dict[str, Any]:
    return {"id": event_id, "type": event_type, "properties": properties}
