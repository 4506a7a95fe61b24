"""In-process live fan-out with one bounded queue per subscriber.

Routing: a subscription names what it filters on (a directory, a session, or nothing), and the
bus keeps an index by it, so an event is offered only to the subscribers of its directory, of its
session and to those that take everything; ``accept`` decides anything finer.

Bounds: a subscription's pending events are limited both in number (``max_events``) and in bytes
(``max_bytes``, as its ``weigh`` reports). One that reaches either limit is cut off rather than
allowed to grow memory: what was queued for it is dropped at once (the memory is released even if
it never reads again) and its next read raises ``Overflowed``; the durable log has all of it. A
single event is always taken into an empty queue, whatever its size.

Event streams do not subscribe one by one: the streams of one kind and route share a feed
(app/events/feed.py), attached to the bus as a single ``Subscriber``; each stream's queue there
has the same limits. The bus tells whether any feed is attached (``has_streams``), and who asked
(``on_streams``) when that changes: other processes send streamed deltas only to a process that
has streams (``app.events.relay``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from app.events.model import Event
from app.observability import metrics

Accept = Callable[[Event], bool]
# The bytes an event takes while queued for a subscription; 0 means it is not queued at all.
Weigh = Callable[[Event], int]
Route = tuple[str, str | None]
EVERYTHING: Route = ("directory", None)


def route(*, directory: str | None = None, session: str | None = None) -> Route:
    """What a subscriber filters on: ``session`` if given, else ``directory`` (None: everything)."""
    return ("session", session) if session is not None else ("directory", directory)


class Overflowed(Exception):
    """The subscriber fell too far behind and was disconnected from the bus."""


class Subscriber(Protocol):
    def offer(self, event: Event) -> None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """What a subscriber may have pending: entries and weighed bytes."""

    max_events: int
    max_bytes: int


def _unit(_event: Event) -> int:
    """The weight of an event for a subscriber that writes no frames (the count limit governs)."""
    return 1


@dataclass(eq=False, slots=True)
class Subscription:
    """One subscriber's bounded queue: filled by ``EventBus.publish``, drained by one consumer.
    Invariant: ``_bytes`` is the weight of what ``_entries`` holds (0 once overflowed)."""

    _bus: EventBus
    _accept: Accept
    _weigh: Weigh
    _limits: Limits
    _route: Route
    _entries: deque[Event] = field(default_factory=deque)
    _bytes: int = 0
    _waiter: asyncio.Future[None] | None = None
    overflowed: bool = False

    def offer(self, event: Event) -> None:
        if self.overflowed or not self._accept(event):
            return
        size = self._weigh(event)
        if not size:
            return
        entries = self._entries
        if entries and self._bytes + size > self._limits.max_bytes:
            self._overflow()
            return
        if len(entries) >= self._limits.max_events:
            self._overflow()
            return
        entries.append(event)
        self._bytes += size
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _overflow(self) -> None:
        self.overflowed = True
        metrics.RECORDER.subscriber_overflow("bus")
        self._bus.unsubscribe(self)
        self._entries.clear()  # release what it held: the log has all of it
        self._bytes = 0
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self) -> Event:
        entry = self._entries.popleft()
        self._bytes -= self._weigh(entry)
        return entry

    async def next(self, timeout: float) -> Event | None:
        """The next event, ``None`` after ``timeout`` seconds of silence; raises ``Overflowed``
        once the subscriber was cut off."""
        if not self._entries and not self.overflowed:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):  # no extra task per event, unlike wait_for
                    await self._waiter
            except TimeoutError:
                return None
            finally:
                self._waiter = None
        if self.overflowed:
            raise Overflowed
        return self._take()

    @property
    def backlog(self) -> int:
        """Events queued and not yet handed out."""
        return len(self._entries)

    @property
    def backlog_bytes(self) -> int:
        """What the queued events weigh (see ``Weigh``)."""
        return self._bytes

    def ready(self, limit: int) -> list[Event]:
        """Up to ``limit`` events already queued, without waiting (to send a burst at once)."""
        return [self._take() for _ in range(min(limit, len(self._entries)))]

    def close(self) -> None:
        self._bus.unsubscribe(self)


class EventBus:
    def __init__(self, queue_size: int, queue_bytes: int = 8 * 1024 * 1024) -> None:
        self.limits = Limits(queue_size, queue_bytes)
        # Subscribers by route: EVERYTHING, ("directory", d) or ("session", s).
        self._routes: dict[Route, set[Subscriber]] = {}
        self.cursor = 0  # cursor of the last durable event published
        self._streams: set[Subscriber] = set()  # the feeds attached (clients' event streams)
        self._on_streams: list[Callable[[], None]] = []

    def subscribe(
        self,
        accept: Accept = lambda _e: True,
        *,
        directory: str | None = None,
        session: str | None = None,
        weigh: Weigh = _unit,
    ) -> Subscription:
        """Events of ``session`` only, else of ``directory`` only, else all, that ``accept`` takes."""
        subscription = Subscription(self, accept, weigh, self.limits, route(directory=directory, session=session))
        self.attach(subscription, subscription._route)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.detach(subscription, subscription._route)

    def attach(self, subscriber: Subscriber, on: Route, *, stream: bool = False) -> None:
        """Offer ``subscriber`` every event published on route ``on`` from now on (``stream``:
        it is a feed of clients' event streams)."""
        self._routes.setdefault(on, set()).add(subscriber)
        if stream:
            self._streams.add(subscriber)
            if len(self._streams) == 1:
                self._streams_changed()

    def detach(self, subscriber: Subscriber, on: Route) -> None:
        subscribers = self._routes.get(on)
        if subscribers is not None:
            subscribers.discard(subscriber)
            if not subscribers:
                del self._routes[on]
        if subscriber in self._streams:
            self._streams.discard(subscriber)
            if not self._streams:
                self._streams_changed()

    @property
    def has_streams(self) -> bool:
        """Whether a client's event stream is attached (through its feed)."""
        return bool(self._streams)

    def on_streams(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever ``has_streams`` changes."""
        self._on_streams.append(callback)

    def _streams_changed(self) -> None:
        for callback in self._on_streams:
            callback()

    def watched(self, *, session: str, directory: str | None) -> bool:
        """Whether a subscriber here would be offered an event of ``session`` in ``directory``."""
        routes = self._routes
        return bool(
            routes.get(EVERYTHING)
            or (directory is not None and routes.get(("directory", directory)))
            or routes.get(("session", session))
        )

    @property
    def subscriber_count(self) -> int:
        return sum(len(subscribers) for subscribers in self._routes.values())

    def publish(self, event: Event) -> None:
        if event.durable:
            self.cursor = max(self.cursor, event.cursor)
        else:
            event.cursor = self.cursor
        routes = self._routes
        self._offer(routes.get(EVERYTHING), event)
        if event.directory is not None:
            self._offer(routes.get(("directory", event.directory)), event)
        if event.session_id is not None:
            self._offer(routes.get(("session", event.session_id)), event)

    @staticmethod
    def _offer(subscribers: set[Subscriber] | None, event: Event) -> None:
        if subscribers:  # a copy: an overflowing subscriber leaves the set while we iterate
            for subscriber in tuple(subscribers):
                subscriber.offer(event)

    def publish_many(self, events: Iterable[Event]) -> None:
        for event in events:
            self.publish(event)
