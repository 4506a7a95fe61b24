"""Live fan-out across the processes that share one PostgreSQL database.

The durable log stays the source of truth; notifications are hints. Every process publishes to
its own bus, in one order, through one queue:
- its own commits (their durable and ephemeral events, in transaction order), after first
  catching up on durable events other processes committed before them;
- notifications from other processes: a durable cursor means "read the log up to here" (the
  events themselves are read back from the log, so nothing depends on a notification's size),
  an ephemeral event (a delta, a status) is published as it came;
- a slow poll of the log (up to what had settled when the poll was queued), so a lost
  notification delays an event but never loses it.

The others hear of a commit once it is durable, from the send loop, in the batch it sends next
with the ephemeral events; never from a NOTIFY inside the transaction. PostgreSQL makes every
transaction that notifies take one database-wide lock at its commit and hold it through the
commit's WAL flush, so the notifying commits of all processes would run one at a time (with two
processes, that serialization cost about a fifth of the throughput: bench/README.md). The price is
a round trip of delay, and a process that dies between its commit and its notification leaves the
others to find that commit by their poll.

A process that has heard from no other lately (``alone``: one process on its database) sends
no notifications at all, but one a second to say it is there; one that starts says so at once,
and the others answer at once, so each learns of the other before it serves a request. (Alone,
the notifications were a round trip per batch of ephemeral events and a statement per commit,
heard by nobody but its own listener.) Being wrong costs time, never events: a commit nobody was
told of is read back by the next catch-up or poll.

Streamed deltas (``*.delta``, most of the ephemeral events of a turn) go only to processes that
have clients' event streams (``EventBus.has_streams``): each process says whether it has any
with its presence, at once when that changes (a process not heard on it yet is taken to have
some). A stream opened on a process that had none may miss the deltas sent in the moment before
the others hear of it; the part's text comes complete with its next update, as for any stream
that joins a reply midway. Statuses and requests go everywhere (a process waits on them).

Every process reads the log only below the settled cursor (``app.events.topology``), so
"everything after the last cursor I published" is gap-free on every process, though transactions
commit in any order. Its own commits are published in the same order, once settled, with their
ephemeral events after them: from memory, as committed (``_own``); the catch-up's read leaves
their transactions out (it only needs the horizon and other processes' events around them).
A notification carries ``{"o": origin, "items": [cursor | event, ...]}``; an ephemeral event too
large for one notification (a permission request with a long diff) travels in pieces,
``{"o": origin, "piece": [index, count], "text": ...}``, reassembled by the receiver (one
origin's notifications arrive in the order they were sent).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from app.events.bus import EventBus
from app.events.model import Event
from app.jsonutil import dumps, loads
from app.store import events as stored_events
from app.store.database import Database
from app.store.events import CURSOR_BITS

log = logging.getLogger("opensession.relay")

CHANNEL = "opensession_events"
MAX_PAYLOAD = 7500  # PostgreSQL's limit is 8000 bytes
POLL_SECONDS = 1.0
PEER_SECONDS = 5 * POLL_SECONDS  # a process not heard from for this long is taken as gone
# A cursor not settled yet (an older transaction still running) is read again after this, doubled
# up to the limit: transactions end within milliseconds unless one is large (an import).
SETTLE_RETRY_S = (0.002, 0.05)
SPREAD_UP_TO = 8
STOP_FLUSH_S = 1.0  # the longest a stopping process waits to tell the others what it did last

# (after, upto, limit, skip) -> up to ``limit`` settled events between, but those of the
# transactions ``skip``, and the settled horizon (``events.settled_up_to``)
Since = Callable[[int, int, int, list[int]], Awaitable[tuple[list[Event], int]]]
READ_LIMIT = 1000
Item = int | dict[str, Any]  # a durable cursor, or an ephemeral event


def _encode(event: Event) -> dict[str, Any]:
    return {
        "t": event.type,
        "p": event.properties,
        "s": event.session_id,
        "d": event.directory,
        "i": event.id,
        "m": event.time,
    }


def _decode(item: dict[str, Any]) -> Event:
    return Event(item["t"], item["p"], item["s"], item["d"], id=item["i"], time=item["m"])


def _pieces(origin: str, text: str) -> list[str]:
    size = MAX_PAYLOAD - 200  # room for the envelope and JSON escaping of the slice
    slices = [text[i : i + size] for i in range(0, len(text), size)]
    while any(len(dumps({"o": origin, "piece": [0, len(slices)], "text": s})) > MAX_PAYLOAD for s in slices):
        size //= 2  # escaping grew a slice past the limit: cut finer
        slices = [text[i : i + size] for i in range(0, len(text), size)]
    return [dumps({"o": origin, "piece": [i, len(slices)], "text": s}) for i, s in enumerate(slices)]


def notifications(origin: str, events: list[Event]) -> list[str]:
    """The payloads that tell other processes about ``events`` (in order): consecutive durable
    events collapse into their last cursor; an oversized ephemeral event goes in pieces."""
    payloads: list[str] = []
    chunk: list[Item] = []

    def flush() -> None:
        nonlocal chunk
        if chunk:
            payloads.append(dumps({"o": origin, "items": chunk}))
            chunk = []

    for event in events:
        item: Item
        if event.durable:
            if chunk and isinstance(chunk[-1], int):
                chunk[-1] = event.cursor
                continue
            item = event.cursor
        else:
            item = _encode(event)
            if len(dumps(item)) > MAX_PAYLOAD - 100:
                flush()
                payloads.extend(_pieces(origin, dumps(item)))
                continue
        if chunk and len(dumps({"o": origin, "items": [*chunk, item]})) > MAX_PAYLOAD:
            flush()
        chunk.append(item)
    flush()
    return payloads


def _durable_only(kind: str, value: Any) -> int | None:
    """The cursor a queue item is to be published up to, when it carries durable events only
    (a local commit without ephemeral events, a notification of commits elsewhere); else None."""
    if kind == "local" and value and all(event.durable for event in value):
        return int(max(event.cursor for event in value))
    if kind == "remote" and value and all(isinstance(item, int) for item in value):
        return int(max(value))
    return None


class ClusterRelay:
    def __init__(self, db: Database, bus: EventBus, origin: str, since: Since) -> None:
        self.db = db
        self.bus = bus
        self.since = since
        self.origin = origin
        # How this process's own notifications begin (every payload is ``{"o": origin, ...}``,
        # keys in that order): its listener gets them too, and they are dropped unparsed.
        self._own_prefix = dumps({"o": origin})[:-1] + ","
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        # Ephemeral events to tell the others; None: say this process is here.
        self._outbox: asyncio.Queue[Event | None] = asyncio.Queue()
        self._peers: dict[str, float] = {}  # other processes' origins -> when last heard from
        self._peer_streams: dict[str, bool] = {}  # whether each said it has clients' streams
        self._last_sent = 0.0
        self._sending = False  # the send loop holds a batch it took from the outbox
        self._tasks: list[asyncio.Task[None]] = []
        self._pieces: dict[str, list[str]] = {}  # origin -> pieces of an event still arriving
        self._held: list[tuple[str, Any]] = []  # an item taken from the queue to look at, not yet run
        # This process's committed durable events not published yet, by cursor: published from
        # here, not read back from the log. Each is past ``bus.cursor`` (a catch-up publishes
        # those it reaches, and the read ones, in one ordered pass).
        self._own: dict[int, Event] = {}
        self._own_cursors: list[int] = []  # ``_own``'s keys, ascending (commits come nearly in order)

    async def start(self) -> None:
        await self.db.listen(CHANNEL, self._received)
        self.bus.on_streams(lambda: self._outbox.put_nowait(None))
        self._outbox.put_nowait(None)
        self._tasks = [
            asyncio.create_task(self._publish_loop(), name="relay:publish"),
            asyncio.create_task(self._send_loop(), name="relay:send"),
            asyncio.create_task(self._poll_loop(), name="relay:poll"),
        ]

    async def stop(self) -> None:
        """Stop once the others were told what this process did last (its last commits, its
        drains' final statuses), or after ``STOP_FLUSH_S``: they would hear of those only with
        their next poll, or another process's next commit."""
        with suppress(TimeoutError):
            async with asyncio.timeout(STOP_FLUSH_S):
                while self._sending or not self._outbox.empty():
                    await asyncio.sleep(0.005)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def _heard_lately(self) -> dict[str, float]:
        gone = time.monotonic() - PEER_SECONDS
        for origin in [origin for origin, heard in self._peers.items() if heard < gone]:
            del self._peers[origin]
            self._peer_streams.pop(origin, None)
        return self._peers

    @property
    def peers(self) -> frozenset[str]:
        """The other processes heard from lately (each says it is there every second)."""
        return frozenset(self._heard_lately())

    def heard_within(self, seconds: float) -> frozenset[str]:
        """The other processes heard from in the last ``seconds``."""
        since = time.monotonic() - seconds
        return frozenset(origin for origin, heard in self._heard_lately().items() if heard >= since)

    @property
    def alone(self) -> bool:
        """Whether no other process was heard from lately: then nobody is told of anything."""
        return not self._heard_lately()

    def _presence(self) -> str:
        """ "I am here", and whether this process has clients' event streams."""
        return dumps({"o": self.origin, "items": [], "s": int(self.bus.has_streams)})

    # -- what enters the queue -------------------------------------------------------------------

    def committed(self, events: list[Event]) -> None:
        """A local transaction committed: publish its events here, and tell the others."""
        for event in events:
            # One at or below the bus's cursor was read back before its commit was reported here.
            if event.durable and event.cursor > self.bus.cursor and event.cursor not in self._own:
                self._own[event.cursor] = event
                bisect.insort(self._own_cursors, event.cursor)
        self._queue.put_nowait(("local", events))
        if not self.alone:
            for event in events:
                self._outbox.put_nowait(event)

    def published(self, event: Event) -> None:
        """A local ephemeral event outside any transaction: publish here, tell the others."""
        self._queue.put_nowait(("ephemeral", event))
        self._outbox.put_nowait(event)

    def _received(self, payload: str) -> None:
        if payload.startswith(self._own_prefix):
            return
        message = loads(payload)
        origin = message.get("o")
        if origin not in self._peers:
            self._outbox.put_nowait(None)  # a newcomer: it learns of this process at once
        self._peers[origin] = time.monotonic()
        if "s" in message:
            self._peer_streams[origin] = bool(message["s"])
        if "piece" in message:
            index, count = message["piece"]
            pieces = self._pieces.setdefault(origin, [])
            if index == 0:
                pieces.clear()
            pieces.append(message["text"])
            if index + 1 == count:
                self._queue.put_nowait(("remote", [loads("".join(self._pieces.pop(origin)))]))
            return
        if items := message.get("items"):
            self._queue.put_nowait(("remote", items))

    # -- the one publishing order ----------------------------------------------------------------

    async def _publish_loop(self) -> None:
        while True:
            kind, value = self._held.pop() if self._held else await self._queue.get()
            try:
                upto = _durable_only(kind, value)
                if upto is not None:
                    # With the items queued right after it that carry durable events only (a
                    # backlog of commits under load): one catch-up to the last of them.
                    while not self._held and not self._queue.empty():
                        item = self._queue.get_nowait()
                        later = _durable_only(*item)
                        if later is None:
                            self._held.append(item)
                        else:
                            upto = max(upto, later)
                    await self._catch_up(upto)
                elif kind == "local":
                    last = max((e.cursor for e in value if e.durable), default=None)
                    if last is not None:
                        await self._catch_up(last)  # its durable events, read back in place
                    for event in value:
                        if not event.durable:
                            self._publish(event)
                elif kind == "ephemeral":
                    self._publish(value)
                    if self._queue.qsize() <= SPREAD_UP_TO:
                        # The few events that queued up behind a read of the log (a stream's
                        # first deltas) go out in loop passes of their own, as they were made,
                        # not merged into one frame; a backlog goes at once.
                        await asyncio.sleep(0)
                elif kind == "remote":
                    for item in value:
                        if isinstance(item, int):
                            await self._catch_up(item)
                        else:
                            self._publish(_decode(item))
                else:  # poll: what had settled when it was queued
                    await self._catch_up(value, settled=True)
            except Exception:  # the database may be briefly unreachable: the next item retries
                log.exception("relay could not publish %s", kind)

    def _publish(self, event: Event) -> None:
        if event.durable and event.cursor <= self.bus.cursor:
            return  # already published (read back from the log first)
        self.bus.publish(event)

    async def _catch_up(self, upto: int, *, settled: bool = False) -> None:
        """Publish durable events from the log, up to cursor ``upto`` (``settled``: known to be).
        Until ``upto`` is settled the log is read again, with a growing pause; one that settles
        with nothing left up to it (its events deleted since) ends the wait.

        Events past ``upto`` are not read: they wait for their own item in the queue, so what was
        queued before that item (the deltas a stream published after its part opened, the idle
        status after a turn's end) goes out before them. (Reading them, and dropping them, made
        a backlog of commits read each other's events again and again.)"""
        pause, longest = SETTLE_RETRY_S
        while self.bus.cursor < upto:
            own = self._own_cursors[: bisect.bisect_right(self._own_cursors, upto)]
            skip = sorted({cursor >> CURSOR_BITS for cursor in own})
            events, horizon = await self.since(self.bus.cursor, upto, READ_LIMIT, skip)
            # Own events go out with the read ones, in cursor order, as far as the read reached:
            # below the horizon (no older transaction can still commit before them). One whose
            # commit was reported during the read was read too: ``_publish`` drops the second copy.
            reached = events[-1].cursor if len(events) >= READ_LIMIT else min(upto, horizon - 1)
            done = bisect.bisect_right(self._own_cursors, reached)
            ready = [self._own.pop(cursor) for cursor in self._own_cursors[:done]]
            del self._own_cursors[:done]
            if ready:
                events = sorted(events + ready, key=lambda event: event.cursor)
            for event in events:
                self._publish(event)
            if (settled or horizon > upto) and len(events) - len(ready) < READ_LIMIT:
                return  # all up to ``upto`` had settled when read, and it read all there was
            if events:
                continue
            await asyncio.sleep(pause)
            pause = min(pause * 2, longest)

    async def _send_loop(self) -> None:
        """Sends what was published while the previous send was on its way as one batch: under
        load a notification per streamed delta would be a round trip each."""
        while True:
            batch = [await self._outbox.get()]
            self._sending = True
            while not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            told = not self.alone
            # Deltas too when another process may have clients' event streams (unsaid: it may).
            streamed = told and any(self._peer_streams.get(origin, True) for origin in self._peers)
            events = [e for e in batch if e is not None and told and (streamed or not e.type.endswith(".delta"))]
            payloads = notifications(self.origin, events)
            if None in batch:
                payloads.append(self._presence())
            try:
                if payloads:
                    await self.db.notify(CHANNEL, *payloads)
                    self._last_sent = time.monotonic()
            except Exception:
                log.exception("relay could not notify other processes")
            finally:
                self._sending = False

    async def _poll_loop(self) -> None:
        """Queue a catch-up on what has settled by now, in place: an event committed after it
        waits for its own item (or the next poll), as above."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            if time.monotonic() - self._last_sent >= POLL_SECONDS:
                self._outbox.put_nowait(None)  # nothing else said this process is here
            try:  # back when the database is: notifications resume, the poll catches up
                await self.db.ensure_listening()
                horizon = await stored_events.settled(self.db)
            except Exception:
                continue
            self._queue.put_nowait(("poll", horizon - 1))
