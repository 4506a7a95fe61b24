"""Live fan-out to event streams: the streams of one kind and route share a feed.

Why: with 100 subscribers, a prompt's ~20 events meant 2,000 queue entries, wake-ups and
sends, each a few tens of microseconds of Python: the subscribers cost several times the turn
itself. A feed is one subscriber of the bus for all its streams: it accepts and encodes an event
once, gathers what arrives within a short spacing into one batch (consecutive deltas of a part
merged, app/events/deltas.py) and hands that batch, one shared chunk of bytes, to every stream:
work per event and stream is gone, what is left is one send per stream and batch, made in the
feed's own call for a stream that waits with nothing queued (``Tap.take``'s sink), after an
append and a wake-up for one that is behind.

Spacing: a batch goes out at once after a quiet moment; under sustained traffic the next waits
until ``spacing()`` has passed since the last, so all streams together write about
``WRITES_PER_SECOND`` times a second, each event waiting at most ``MAX_WRITE_INTERVAL``.

Bounds: a stream's pending batches are limited in events (a merged run counts once) and in bytes
(``Limits`` of the bus); a stream that reaches either is cut off at once, its batches dropped, and
it ends with a frame saying where to resume. The bytes a stream took and is still writing count
too: a client that stops reading leaves its last write waiting, and those bytes are held as long
as the queued ones, so such a client holds about the byte limit, not the limit and a write as
large again. A single batch is always taken when nothing is queued or being written. A stream
that falls more than one batch behind gets the deltas of the batches it takes at once merged
again, so it catches up with fewer frames.

Heartbeats: after ``interval`` seconds without a batch the feed hands every stream a heartbeat.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from app.events import deltas
from app.events.bus import Accept, EventBus, Limits, Overflowed, Route
from app.events.model import Event
from app.observability import metrics

WRITES_PER_SECOND = 4000  # live writes of all streams together, under sustained traffic
MAX_WRITE_INTERVAL = 0.015  # seconds: the most a feed holds back an event (fan-out p99 target 50 ms)

Frames = Callable[[Event], bytes]  # an event's frames on this kind of stream; b"" means none
Position = Callable[[Event], int]  # the resume position an event's frame carries
# A waiting stream's writer, called with a batch as the feed hands it out: True once the batch is
# written, False once the stream has to run before it can write again (the write waits for the
# client, or failed).
Sink = Callable[["Batch"], bool]


@dataclass(frozen=True, slots=True)
class Batch:
    """Events a feed handed out together, with their frames joined once for every stream."""

    chunk: bytes
    events: list[Event]
    position: int  # the highest position among ``events`` (-1: none, a heartbeat)
    first_durable: int  # the lowest position of a durable event among them (-1: none)
    last: bool = False  # holds an event after which the streams end (``Kind.last``)


@dataclass(frozen=True, slots=True)
class Kind:
    """What a feed does with an event: the same for every stream of its kind and route."""

    accept: Accept
    frames: Frames
    position: Position
    heartbeat: Callable[[], bytes]
    last: Accept | None = None  # an event after which this kind of stream ends

    def batch(self, events: list[Event], chunk: bytes | None = None) -> Batch:
        """``last`` is worked out here once for every stream of the feed, which reads it off. A
        batch ends with such an event: what came after it in the same spacing never reaches
        the streams it ends (a revoked share's, a disposed directory's)."""
        last = False
        if self.last is not None:
            end = next((i for i, event in enumerate(events) if self.last(event)), None)
            if end is not None:
                last, events = True, events[: end + 1]
        position, first_durable = -1, -1
        for event in events:
            at = self.position(event)
            position = max(position, at)
            if event.durable and (first_durable < 0 or at < first_durable):
                first_durable = at
        if chunk is None:
            chunk = b"".join(self.frames(event) for event in events)
        return Batch(chunk, events, position, first_durable, last)


@dataclass(eq=False, slots=True)
class Tap:
    """One stream's queue of batches: filled by its feed, drained by the stream."""

    _feed: Feed
    _batches: list[Batch] = field(default_factory=list)
    _events: int = 0
    _bytes: int = 0
    _writing: int = 0  # bytes the stream took (or its sink began) and has not finished writing
    _waiter: asyncio.Future[None] | None = None
    _sink: Sink | None = None
    overflowed: bool = False

    def push(self, batch: Batch, limits: Limits) -> None:
        """Write ``batch`` at once through the sink of a stream waiting with nothing queued;
        otherwise queue it, or cut the stream off if it is over its limits. A stream waiting for
        batches (``_waiter`` set, until it runs again) is never over them: it is not behind, the
        loop has not come round to it yet (under load, with large deltas, readers that kept up
        were cut off that way). Only a stream busy writing what it took, which means its client
        is not reading, is held to the limits, the bytes it is still writing included."""
        if self._sink is not None and not self._batches:
            if not self._sink(batch):
                self._sink = None
                self._writing = len(batch.chunk)  # the write waits for the client: held until done
                self.wake()
            return
        size, count = len(batch.chunk), len(batch.events)
        over = self._writing + self._bytes + size > limits.max_bytes or self._events + count > limits.max_events
        if (self._batches or self._writing) and over and self._waiter is None:
            self.overflowed = True
            metrics.RECORDER.subscriber_overflow("stream")
            self._feed.leave(self)
            self._batches.clear()  # release what it held: the log has all of it
            self._events = self._bytes = 0
        else:
            self._batches.append(batch)
            self._events += count
            self._bytes += size
        self.wake()

    async def take(self, sink: Sink | None = None) -> list[Batch]:
        """Every batch queued, waiting for one if none is; raises ``Overflowed`` once cut off;
        none once the feeds closed (``closed``) or ``sink`` has to be attended to. Calling it
        says the stream has written everything it took before.

        While it waits, batches go to ``sink`` as they are handed out, in the feed's own call:
        waking the stream's task for each would cost a loop pass per batch (and under load the
        batch would wait for it) and a task switch per stream."""
        self._writing = 0
        if not self._batches and not self.overflowed and not self._feed.closed:
            self._waiter = asyncio.get_running_loop().create_future()
            self._sink = sink
            try:
                await self._waiter
            finally:
                self._waiter = None
                self._sink = None
        if self.overflowed:
            raise Overflowed
        if self._feed.closed:
            return []
        batches, self._batches = self._batches, []
        self._writing += self._bytes  # on top of a write the sink began, if one waits
        self._events = self._bytes = 0
        return batches

    @property
    def closed(self) -> bool:
        """The feeds closed: the server shuts down, the stream ends."""
        return self._feed.closed

    def merged(self, batches: list[Batch]) -> Batch:
        """Several batches taken at once as one, their deltas merged across them."""
        return self._feed.merged(batches)

    def batch(self, events: list[Event]) -> Batch:
        return self._feed.kind.batch(events)

    def close(self) -> None:
        self._feed.leave(self)

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Feed:
    """One bus subscriber batching events for every stream of one kind and route."""

    def __init__(self, feeds: Feeds, key: tuple[str, Route], kind: Kind) -> None:
        self.kind = kind
        self.closed = False  # the server shuts down: streams end
        self._feeds = feeds
        self._key = key
        self._taps: set[Tap] = set()
        self._pending: list[Event] = []
        self._loop = asyncio.get_running_loop()
        self._flushed = -MAX_WRITE_INTERVAL  # loop time of the last batch
        self._flush: asyncio.TimerHandle | asyncio.Handle | None = None
        self._beat = self._loop.call_later(feeds.interval, self._heartbeat)
        self._last_merge: tuple[list[Batch], Batch] | None = None

    def offer(self, event: Event) -> None:
        """From ``EventBus.publish``: keep the event for the next batch if this kind has frames
        for it, and make sure that batch is on its way."""
        kind = self.kind
        if not kind.accept(event) or not kind.frames(event):
            return
        self._pending.append(event)
        if self._flush is None:
            due = self._flushed + self._feeds.spacing()
            if due <= self._loop.time():
                self._flush = self._loop.call_soon(self.flush)
            else:
                self._flush = self._loop.call_at(due, self.flush)

    def flush(self) -> None:
        """Hand what is pending to every stream as one batch."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if not self._pending:
            return
        events, self._pending = deltas.coalesce(self._pending), []
        self._flushed = self._loop.time()
        self._hand(self.kind.batch(events))

    def merged(self, batches: list[Batch]) -> Batch:
        """``batches`` as one batch, their deltas merged across them. Streams that fell behind
        together (woken in the same loop pass) take the same batches: the last merge is kept, so
        they share one merge and one encoding instead of each redoing both (with many subscribers
        falling behind, the repeated work showed in a profile of the server)."""
        last = self._last_merge
        if last is not None and len(last[0]) == len(batches) and all(map(operator.is_, last[0], batches)):
            return last[1]
        events = [event for batch in batches for event in batch.events]
        merged = self.kind.batch(deltas.coalesce(events)) if events else batches[-1]  # else heartbeats only
        self._last_merge = (batches, merged)
        return merged

    def _hand(self, batch: Batch) -> None:
        limits = self._feeds.limits
        for tap in tuple(self._taps):  # a copy: an overflowing tap leaves the set
            tap.push(batch, limits)

    def _heartbeat(self) -> None:
        quiet = self._loop.time() - self._flushed
        interval = self._feeds.interval
        if quiet >= interval:
            self._hand(self.kind.batch([], self.kind.heartbeat()))
            self._flushed = self._loop.time()
            quiet = 0.0
        self._beat = self._loop.call_later(interval - quiet, self._heartbeat)

    def join(self) -> Tap:
        """A new stream: it gets every event published from now on (what is pending was
        published before it came, so that goes out first, to the others)."""
        self.flush()
        tap = Tap(self)
        self._taps.add(tap)
        self._feeds.streams += 1
        return tap

    def close(self) -> None:
        self.closed = True
        for tap in self._taps:
            tap.wake()

    def leave(self, tap: Tap) -> None:
        if tap not in self._taps:
            return
        self._taps.discard(tap)
        self._feeds.streams -= 1
        if not self._taps:  # nobody is left: what is pending goes with the feed
            if self._flush is not None:
                self._flush.cancel()
            self._beat.cancel()
            self._feeds.drop(self._key, self)


class Feeds:
    """The feeds of one bus by stream kind and route, created with their first stream."""

    def __init__(self, bus: EventBus, interval: float) -> None:
        self.bus = bus
        self.interval = interval  # seconds without a batch before streams get a heartbeat
        self.limits = bus.limits
        self.streams = 0  # streams of every feed together
        self._feeds: dict[tuple[str, Route], Feed] = {}
        self.closed = False

    def join(self, name: str, route: Route, make: Callable[[], Kind]) -> Tap:
        """A tap on the feed of streams of kind ``name`` on ``route`` (``make`` describes the
        kind when the feed does not exist yet: streams of one name must filter and encode alike)."""
        key = (name, route)
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(self, key, make())
            feed.closed = self.closed
            self.bus.attach(feed, route, stream=True)
        return feed.join()

    def close(self) -> None:
        """End every stream (it writes its final chunk): the server is shutting down."""
        self.closed = True
        for feed in self._feeds.values():
            feed.close()

    def drop(self, key: tuple[str, Route], feed: Feed) -> None:
        if self._feeds.get(key) is feed:
            del self._feeds[key]
            self.bus.detach(feed, key[1])

    def spacing(self) -> float:
        """How long a feed waits between batches under sustained traffic."""
        return min(MAX_WRITE_INTERVAL, self.streams / WRITES_PER_SECOND)
