"""SSE plumbing shared by every event stream: subscribe first, replay the durable log from the
client's position, then go live, dropping live duplicates of what the replay already sent. So a
stream is gap-free and duplicate-free across the replay/live boundary.

Every event frame carries ``id: <position>`` (the whole-server cursor, or the session's ``seq``
on a per-session stream), so a client that reconnects with ``Last-Event-ID`` receives every
durable event it missed. Ephemeral events (deltas) are not replayed; the final part event
carries the whole text. A frame that is not an event never moves a client's resume position:
the opening ``server.connected`` carries the position the stream starts from (the one the client
resumed from, or for a new stream the last event published before it subscribed), and
heartbeats carry no ``id:`` at all (EventSource then keeps the last one it saw). A position past
the head of the log is never taken as "sent already" (``EventSources.open``).

Speed: streams do not subscribe to the bus one by one. The streams of one kind and route share a
feed (app/events/feed.py) that filters and encodes an event once (stored JSON is spliced in, not
decoded and re-encoded) and hands every stream the same chunk of bytes for a batch of events. A
stream waiting for events is written to in that same call (``Body.write_now``); one that is
behind writes whatever batches it has in one send.

The response is our own small ASGI app (``EventStream``), not sse-starlette's
``EventSourceResponse``: that one runs every send inside an anyio cancel scope (its send timeout),
a task group and a per-message encode, which with 100 subscribers cost about as much as the sends
themselves. Ours writes the ready-made chunks as ``http.response.body`` messages, watches
``receive`` in one task per stream to notice a client that went away (the same task gives up a
write that waits too long: the send timeout), and ends with a proper final chunk. At shutdown the server
(app/api/server.py) ends the streams first, as sse-starlette did, so it does not wait for them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app import ids
from app.events import bus
from app.events.bus import Accept, EventBus, Overflowed
from app.events.feed import Batch, Feeds, Kind, Tap
from app.events.model import Event
from app.events.topology import Snapshot
from app.runtime.errors import InvalidInput

SSE_HEADERS = [
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
    (b"x-content-type-options", b"nosniff"),
    (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]
REPLAY_BATCH = 1000
HEARTBEAT_COMMENT = b": heartbeat\n\n"
MAX_POSITION = 2**63 - 1  # positions are SQLite integers

Encode = Callable[[Event], bytes]  # the frame's JSON; b"" means: no frame for this event here
Replay = Callable[[int], Awaitable[list[Event]]]  # durable events after a position, one batch
# The head of the log a stream reads (in its positions) when the given position is past it, else None.
Beyond = Callable[[int], Awaitable[int | None]]


def frame(data: bytes, frame_id: int | None = None) -> bytes:
    """One SSE frame with bare "\\n" line endings (OpenCode's framing; the official SDK splits on
    "\\n\\n" only). Compact JSON never contains a newline, so one ``data:`` line suffices."""
    head = b"" if frame_id is None else b"id: %d\n" % frame_id
    return head + b"data: " + data + b"\n\n"


def resume_position(last_event_id: str | None) -> int | None:
    """The position a reconnecting client resumes from (its ``Last-Event-ID``), if it sent one."""
    if last_event_id is None or last_event_id == "":
        return None
    try:
        position = int(last_event_id)
    except ValueError:
        position = -1
    if not 0 <= position <= MAX_POSITION:
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
    # How this stream filters and encodes: the key of an event's cached frames for it and, with the
    # route, of the feed its streams share (app/events/feed.py).
    kind: str
    position: Callable[[Event], int]
    replay: Replay
    beyond: Beyond
    heartbeat: Callable[[], bytes]
    connected: Callable[[int], bytes] | None = None  # given the position the stream starts from
    # The frame after ``connected`` of a stream asked to resume past the head of the log, given the
    # position asked for and the head, where the stream starts instead.
    unknown: Callable[[int, int], bytes] | None = None
    # The last frame of a subscriber cut off for falling behind, given the position to resume from.
    overflow: Callable[[int], bytes] | None = None
    twin: Encode | None = None  # a second frame for durable events (/global/event's sync twin)
    # The event after whose frame the stream ends (/event's server.instance.disposed, as OpenCode's).
    last: Accept | None = None
    # Asked once the stream is subscribed; False ends it before its first frame. A right that
    # ``last`` takes away (a share's token) may be lost between the route's check and the
    # subscription, and then no event would tell the stream.
    still_allowed: Callable[[], Awaitable[bool]] | None = None
    # What the bus routes on (app/events/bus.py): only this session's, else this directory's events.
    session: str | None = None
    directory: str | None = None

    def frames(self, event: Event) -> bytes:
        return event.encoded(self.kind, self._render)

    def tap(self, feeds: Feeds) -> Tap:
        """This stream's place on the feed of its kind and route (one kind of stream filters and
        encodes alike on a route, so its streams share the feed)."""
        on = bus.route(directory=self.directory, session=self.session)
        return feeds.join(
            self.kind, on, lambda: Kind(self.accept, self.frames, self.position, self.heartbeat, self.last)
        )

    def _render(self, event: Event) -> bytes:
        position = self.position(event)
        payload = self.encode(event)
        rendered = frame(payload, position) if payload else b""
        if self.twin is not None and event.durable:
            rendered += frame(self.twin(event), position)
        return rendered


async def _stream(
    sources: EventSources, spec: StreamSpec, after: int | None, body: Body, notice: bytes
) -> AsyncGenerator[bytes, None]:
    tap = spec.tap(sources.feeds)
    origin = after if after is not None else sources.bus.cursor  # read with the tap, no await between
    sent = origin  # the position a client that has everything written so far resumes from
    # A live stream starts at the bus's cursor, and past what had committed by the time it
    # opened but not reached the bus yet (``LogTopology.committed_now``): read after the tap,
    # so whatever reaches the bus from then on is either in it or in the tap.
    earlier: Snapshot | None = None
    replayed_to = -1
    ending = False  # the stream's last event went out (``spec.last``): end after it

    def chunk_of(batches: list[Batch]) -> bytes:
        nonlocal sent, earlier
        batch = batches[0] if len(batches) == 1 else tap.merged(batches)  # behind: merge deltas
        if 0 <= batch.first_durable <= replayed_to:  # just after the replay: drop what it sent
            fresh = [e for e in batch.events if not (e.durable and spec.position(e) <= replayed_to)]
            batch = tap.batch(fresh)
        if earlier is not None and batch.first_durable >= 0:  # committed before it opened: drop
            reached = max(e.cursor for e in batch.events if e.durable)
            fresh = [e for e in batch.events if not (e.durable and earlier.committed(e.cursor))]
            if len(fresh) < len(batch.events):
                batch = tap.batch(fresh)
            if reached >= earlier.ceiling:
                earlier = None  # the bus publishes in cursor order: none is still to come
        # Every frame's id is a safe resume position (an ephemeral frame carries the cursor of
        # the last durable event before it, which may be one this stream filtered out).
        sent = max(sent, batch.position)
        return batch.chunk

    def write_now(batch: Batch) -> bool:
        nonlocal ending
        chunk = chunk_of([batch])
        if batch.last:
            ending = True
            if chunk:
                body.write_now(chunk)  # a write that has to wait is finished by settle()
            return False  # the stream runs again, to end
        return not chunk or body.write_now(chunk)

    try:
        if after is None:
            earlier = await sources.committed_now()
        if spec.still_allowed is not None and not await spec.still_allowed():
            return
        yield b""  # set up: the headers may go out (``EventStream``), and the frames after them
        if spec.connected is not None:
            yield spec.connected(origin)
        if notice:
            yield notice
        if after is not None:
            replayed_to = after
            while True:
                events = await spec.replay(replayed_to)
                if events:
                    replayed_to = spec.position(events[-1])
                    chunk = b"".join(spec.frames(event) for event in events if spec.accept(event))
                    if chunk:
                        yield chunk
                    sent = replayed_to
                if len(events) < REPLAY_BATCH:
                    break
        while not ending:
            batches = await tap.take(write_now)
            await body.settle()  # a write the feed began that had to wait for the client
            if tap.closed:  # the server shuts down
                break
            if batches and (chunk := chunk_of(batches)):
                yield chunk
            ending = ending or any(batch.last for batch in batches)
    except Overflowed:
        # Cut off for falling behind: say so, with where to resume, and end the response.
        if spec.overflow is not None:
            yield spec.overflow(sent)
        return
    finally:
        tap.close()


class _Resume:
    """The rest of an awaitable that ``Body.write_now`` ran up to its first wait, to be awaited in
    a task: what the task sends or throws in goes on to it, as awaiting it would have done."""

    __slots__ = ("_steps", "_waiting")

    def __init__(self, steps: Generator[Any, Any, None], waiting: Any) -> None:
        self._steps = steps
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        steps, waiting = self._steps, self._waiting
        while True:
            try:
                value = yield waiting
            except BaseException as exc:
                step = functools.partial(steps.throw, exc)
            else:
                step = functools.partial(steps.send, value)
            try:
                waiting = step()
            except StopIteration:
                return


class Body:
    """The response body sends of one event stream, in order. Its own task writes with ``write``;
    a feed, handing out a batch while the stream waits, writes with ``write_now``, in its own call.

    Why: a batch handed to 100 waiting streams meant 100 task wake-ups, each a loop pass later;
    under load a pass takes tens of milliseconds, and that pass was most of a delta's fan-out
    delay. ``write_now`` runs the ASGI ``send`` up to its first wait (as an eager task would,
    which Python 3.11 lacks): a client that keeps up never makes it wait, so the write is done.
    If it does wait (the client's socket is full), the rest is left to the stream's task
    (``settle``), which takes over before anything else is written."""

    __slots__ = ("_error", "_loop", "_pending", "_send", "writing")

    def __init__(self) -> None:
        self._send: Send | None = None
        self._pending: _Resume | None = None
        self._error: Exception | None = None
        self._loop = asyncio.get_running_loop()
        self.writing = 0.0  # loop time the pending write began; 0: none pending

    def bind(self, send: Send) -> None:
        self._send = send

    async def write(self, chunk: bytes) -> None:
        await self.settle()
        assert self._send is not None, "bind first"
        self.writing = self._loop.time()
        await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        self.writing = 0.0

    def write_now(self, chunk: bytes) -> bool:
        """Write ``chunk`` now; False when the write has to be finished by ``settle``."""
        if self._send is None or self._pending is not None or self._error is not None:
            return False  # cannot happen while the stream waits with nothing pending
        steps = self._send({"type": "http.response.body", "body": chunk, "more_body": True}).__await__()
        try:
            waiting = steps.send(None)
        except StopIteration:
            return True
        except Exception as exc:  # raised in the stream's task, not in the feed's call
            self._error = exc
            return False
        self._pending = _Resume(steps, waiting)
        self.writing = self._loop.time()  # the send timeout counts from here
        return False

    async def settle(self) -> None:
        """Finish a write ``write_now`` began (raising what it raised), if one is pending."""
        if self._error is not None:
            raise self._error
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending
            self.writing = 0.0


class EventStream(Response):
    """The response of an event stream: its chunks as they come, until the stream ends (then a
    final chunk) or the client goes away (then the stream's generator is closed, releasing its
    tap). A stream whose client leaves a write waiting longer than ``send_timeout`` is dropped
    (with the tap's queue bounded, a client that never reads holds bounded memory); the check
    runs every half timeout, so such a write is given up 1 to 1.5 timeouts after it began. A
    timer per write would cost more than the write itself does in Python."""

    def __init__(self, chunks: AsyncGenerator[bytes, None], body: Body, send_timeout: float) -> None:
        super().__init__()
        self._chunks = chunks
        self._body = body
        self._send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The stream takes its place first (its tap, what had committed by then; an empty first
        # chunk says it has): a client that writes once it sees the headers gets those events.
        started = await anext(self._chunks, None) is not None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        except BaseException:
            await self._chunks.aclose()  # releases the tap
            raise
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        body = self._body
        body.bind(send)
        ended = False  # the client went away or let a write wait too long: no final chunk

        async def watch() -> None:
            nonlocal ended
            message = asyncio.ensure_future(receive())
            try:
                while True:
                    await asyncio.wait((message,), timeout=self._send_timeout / 2)
                    if message.done():
                        if message.result()["type"] == "http.disconnect":
                            break
                        message = asyncio.ensure_future(receive())
                    elif body.writing and loop.time() - body.writing > self._send_timeout:
                        break
            finally:
                message.cancel()
            ended = True
            task.cancel()

        watcher = asyncio.create_task(watch())
        try:
            if started:  # else refused before its first frame (``StreamSpec.still_allowed``)
                async for chunk in self._chunks:
                    await body.write(chunk)
            await body.settle()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not ended:
                raise
            task.uncancel()  # nobody to tell: the server closes the connection, the tap is released
        finally:
            watcher.cancel()
            await self._chunks.aclose()


@dataclass(frozen=True, slots=True)
class EventSources:
    """What an event stream is served from: the feeds sharing the bus, the bus (whose cursor a
    live stream starts at), what has committed but may not be on the bus yet, and how long one
    write to a client may block."""

    feeds: Feeds
    bus: EventBus
    committed_now: Callable[[], Awaitable[Snapshot | None]]  # ``LogTopology.committed_now``
    send_timeout: float

    async def open(self, spec: StreamSpec, after: int | None) -> EventStream:
        """The stream of ``spec`` replaying what follows ``after`` (None: live from now on).

        A position past the head of the log (a reconnect's ``Last-Event-ID`` kept across a database
        reset, or from another server) would have the stream drop every durable event up to it as
        already sent. The stream starts at the head instead, its ``unknown`` frame telling the client
        its cursor was not this log's (what it shows may be stale); whatever is committed after the
        head was read is replayed, so nothing is missed. (An EventSource given a 400 would give up.)"""
        notice = b""
        if after is not None and (head := await spec.beyond(after)) is not None:
            notice = spec.unknown(after, head) if spec.unknown is not None else b""
            after = head
        body = Body()
        return EventStream(_stream(self, spec, after, body, notice), body, self.send_timeout)


def legacy_envelope(event: Event) -> bytes:
    """``{"id", "type", "properties"}`` with the payload spliced in as stored."""
    return b'{"id":"%s","type":"%s","properties":%s}' % (
        event.id.encode(),
        event.type.encode(),
        event.properties_json(),
    )


def control_frame(
    event_type: str, *, position: int | None = None, properties: bytes = b"{}", wrap: bool = False
) -> bytes:
    """A legacy-shaped frame that is not an event of the log (connected, heartbeat, overflow): it
    carries the stream's starting position or no id at all; ``wrap`` puts it under ``payload``
    (/global/event)."""
    payload = b'{"id":"%s","type":"%s","properties":%s}' % (ids.event_id().encode(), event_type.encode(), properties)
    return frame(b'{"payload":%s}' % payload if wrap else payload, position)


def cursor_unknown_frame(requested: int, head: int, *, wrap: bool = False) -> bytes:
    """``server.cursor.unknown`` (a type OpenCode clients ignore), right after ``server.connected``:
    the ``Last-Event-ID`` the client resumed from is past this log's head, so the stream starts
    at the head (``resume``) and what the client holds from before may be stale."""
    properties = b'{"lastEventID":"%d","resume":"%d"}' % (requested, head)
    return control_frame("server.cursor.unknown", position=head, properties=properties, wrap=wrap)


def overflow_frame(position: int, *, wrap: bool = False) -> bytes:
    """``server.overflow`` (a type OpenCode clients ignore), the last frame of a subscriber cut off
    for falling behind: the stream ends; reconnect with ``Last-Event-ID: <resume>``."""
    return control_frame("server.overflow", position=position, properties=b'{"resume":"%d"}' % position, wrap=wrap)
