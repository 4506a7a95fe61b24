"""In-process live fan-out with one bounded queue per subscriber.

A subscriber that falls ``maxsize`` events behind is cut off rather than allowed to grow memory:
what was queued for it is dropped at once (the memory is released even if it never reads again),
its stream ends with a last frame saying so, and the client reconnects with the last id it saw
while the durable log fills the gap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from app.events.model import Event

Accept = Callable[[Event], bool]


class Overflowed(Exception):
    """The subscriber fell too far behind and was disconnected from the bus."""


class Subscription:
    def __init__(self, bus: EventBus, accept: Accept, maxsize: int) -> None:
        self._bus = bus
        self._accept = accept
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self.overflowed = False

    def offer(self, event: Event) -> None:
        if self.overflowed or not self._accept(event):
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True
            self._bus.unsubscribe(self)
            while not self._queue.empty():  # release what it held: the log has all of it
                self._queue.get_nowait()

    async def next(self, timeout: float) -> Event | None:
        """The next event, ``None`` after ``timeout`` seconds of silence; raises ``Overflowed``
        once the subscriber was cut off."""
        if self.overflowed:
            raise Overflowed
        if not self._queue.empty():
            return self._queue.get_nowait()
        try:
            async with asyncio.timeout(timeout):  # no extra task per event, unlike wait_for
                return await self._queue.get()
        except TimeoutError:
            return None

    @property
    def backlog(self) -> int:
        """Events queued and not yet handed out."""
        return self._queue.qsize()

    def ready(self, limit: int) -> list[Event]:
        """Up to ``limit`` events already queued, without waiting (to send a burst at once)."""
        events: list[Event] = []
        while len(events) < limit and not self._queue.empty():
            events.append(self._queue.get_nowait())
        return events

    def close(self) -> None:
        self._bus.unsubscribe(self)


class EventBus:
    def __init__(self, queue_size: int) -> None:
        self._subscribers: set[Subscription] = set()
        self._queue_size = queue_size
        self.cursor = 0  # cursor of the last durable event published

    def subscribe(self, accept: Accept = lambda _e: True) -> Subscription:
        subscription = Subscription(self, accept, self._queue_size)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: Event) -> None:
        if event.durable:
            self.cursor = max(self.cursor, event.cursor)
        else:
            event.cursor = self.cursor
        for subscription in tuple(self._subscribers):
            subscription.offer(event)

    def publish_many(self, events: Iterable[Event]) -> None:
        for event in events:
            self.publish(event)
