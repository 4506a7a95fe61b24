"""The cluster relay's one publishing order (``app.events.relay``), with the log it reads back
stood in for: what a process queued is published in that order, a backlog of commits is read
back in as few reads as that order allows, and a process's own commits are never read back: they
go out from memory, among the other processes' events in cursor order, once settled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from app.events.bus import EventBus, Subscription
from app.events.model import Event
from app.events.relay import POLL_SECONDS, ClusterRelay, Since, notifications
from app.jsonutil import dumps, loads
from app.store.database import Params, Row
from app.store.events import CURSOR_BITS
from app.store.statement import Statement

HORIZON = 1000  # every commit below has settled


class _Notifications:
    """The relay's database where nothing is read but the settled horizon (its poll); ``heard``
    delivers a notification."""

    heard: Callable[[str], None]

    async def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        self.heard = callback

    async def ensure_listening(self) -> None:
        return None

    async def notify(self, channel: str, *payloads: str) -> None:
        return None

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        return [(HORIZON,)]


class _Recorded(_Notifications):
    """Also keeps what the relay sent the others, decoded."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def notify(self, channel: str, *payloads: str) -> None:
        self.sent.extend(loads(payload) for payload in payloads)

    async def until_sent(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.sent) < count:
                await asyncio.sleep(0.001)


@asynccontextmanager
async def _running(database: _Notifications, since: Since) -> AsyncIterator[tuple[ClusterRelay, Subscription]]:
    """A relay over ``database`` (reading the log through ``since``), and a subscriber of its bus."""
    bus = EventBus(100)
    seen = bus.subscribe()
    relay = ClusterRelay(database, bus, "here", since)  # type: ignore[arg-type]  # stands in for the log
    await relay.start()
    try:
        yield relay, seen
    finally:
        await relay.stop()


def _durable(cursor: int) -> Event:
    return Event("message.updated", {}, "ses_a", "/p", durable=True, seq=cursor, cursor=cursor)


async def test_a_backlog_of_commits_is_read_back_once_between_ephemeral_events() -> None:
    log = {cursor: _durable(cursor) for cursor in range(1, 7)}
    reads: list[tuple[int, int]] = []

    async def since(after: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
        reads.append((after, upto))
        found = [e for c, e in sorted(log.items()) if after < c <= upto and c >> CURSOR_BITS not in skip]
        return found[:limit], HORIZON

    bus = EventBus(100)
    seen = bus.subscribe()
    relay = ClusterRelay(_Notifications(), bus, "here", since)  # type: ignore[arg-type]  # stands in for the log
    delta = Event("message.part.delta", {"delta": "x"}, "ses_a", "/p")
    # Queued before the relay runs: three commits, a delta, two commits, one with an ephemeral event.
    for cursor in (1, 2, 3):
        relay.committed([log[cursor]])
    relay.published(delta)
    relay.committed([log[4]])
    status = Event("session.status", {"status": {"type": "idle"}}, "ses_a", "/p")
    relay.committed([log[5], status])
    relay.committed([log[6]])
    await relay.start()
    try:
        order: list[str | int] = []
        async with asyncio.timeout(5):
            while len(order) < 8:
                event = await seen.next(5)
                assert event is not None
                order.append(event.cursor if event.durable else event.type)
    finally:
        await relay.stop()
    assert order == [1, 2, 3, "message.part.delta", 4, 5, "session.status", 6]
    # One read for the first three, one for the fourth, one for the fifth (its status must follow
    # it), one for the sixth: never a read per commit of a run, never past an ephemeral event.
    assert reads == [(0, 3), (3, 4), (4, 5), (5, 6)]


async def test_own_commits_are_not_read_back_and_wait_for_older_transactions() -> None:
    """Transaction 5 committed here; 4 (another process's, older) still runs, then commits; 6
    (another's, newer) committed meanwhile. 5's events wait for 4 to end, go out after 4's and
    before 6's, and no read returns them."""

    def of(transaction: int, count: int) -> list[Event]:
        return [_durable((transaction << CURSOR_BITS) + index) for index in range(1, count + 1)]

    older, own, newer = of(4, 2), of(5, 3), of(6, 1)
    horizon = 4 << CURSOR_BITS  # transaction 4 runs: nothing from it on has settled
    returned: list[int] = []

    async def since(after: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
        stored = [*older, *own, *newer] if horizon > 4 << CURSOR_BITS else [*own, *newer]
        found = [
            e for e in stored if after < e.cursor <= upto and e.cursor < horizon and e.cursor >> CURSOR_BITS not in skip
        ]
        returned.extend(e.cursor for e in found[:limit])
        return found[:limit], horizon

    database = _Notifications()
    async with _running(database, since) as (relay, seen):
        relay.committed(own)
        for payload in notifications("there", newer):  # as the other process sent them
            database.heard(payload)
        await asyncio.sleep(0.1)
        assert relay.bus.cursor == 0  # transaction 4 may still commit below them
        horizon = 7 << CURSOR_BITS
        order: list[int] = []
        async with asyncio.timeout(5):
            while len(order) < 6:
                event = await seen.next(5)
                assert event is not None
                order.append(event.cursor)
    assert order == [e.cursor for e in (*older, *own, *newer)]
    assert not set(returned) & {e.cursor for e in own}


async def test_own_commits_reported_out_of_order_go_out_in_cursor_order_and_none_is_kept() -> None:
    """Own transactions commit in any order: 7, then 5, then 6 (each reported as it commits,
    5's twice, as after a read that already returned it). Each goes out once, in cursor order,
    and the relay keeps none of them afterwards."""

    def of(transaction: int) -> list[Event]:
        return [_durable((transaction << CURSOR_BITS) + index) for index in (1, 2)]

    commits = {transaction: of(transaction) for transaction in (5, 6, 7)}
    horizon = 5 << CURSOR_BITS  # transaction 5 runs until it is reported

    async def since(after: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
        return [], horizon

    order: list[int] = []

    async def published(count: int) -> None:
        async with asyncio.timeout(5):
            while len(order) < count:
                event = await seen.next(5)
                assert event is not None
                order.append(event.cursor)

    async with _running(_Notifications(), since) as (relay, seen):
        relay.committed(commits[7])
        await asyncio.sleep(0.05)
        relay.committed(commits[5])
        relay.committed(commits[5])
        horizon = 6 << CURSOR_BITS  # 5 has settled; 6 still runs, so 7 waits
        await published(2)
        relay.committed(commits[6])
        horizon = 8 << CURSOR_BITS
        await published(6)
        assert await seen.next(0.1) is None
        assert relay._own == {}
    assert order == [e.cursor for transaction in (5, 6, 7) for e in commits[transaction]]


async def test_a_process_drops_its_own_notifications_and_takes_the_others() -> None:
    """Every listener hears every notification, its own process's too: those are dropped, as a
    notification from an origin whose name only begins like this one's is not."""
    database = _Notifications()
    async with _running(database, _reads_nothing) as (_relay, seen):
        delta = Event("message.part.delta", {"delta": "x"}, "ses_a", "/p")
        for origin in ("here", "here-too", "there"):
            for payload in notifications(origin, [delta]):
                database.heard(payload)
        heard = [await seen.next(5) for _ in range(2)]
        assert await seen.next(0.1) is None
    assert [event.type if event else None for event in heard] == ["message.part.delta"] * 2


async def test_a_process_alone_tells_nobody_and_answers_a_newcomer_at_once() -> None:
    database = _Recorded()
    sent, until_sent = database.sent, database.until_sent
    async with _running(database, _reads_nothing) as (relay, _seen):
        await until_sent(1)
        assert sent == [{"o": "here", "items": [], "s": 0}]  # it says it is here, once started
        assert relay.alone
        relay.published(Event("message.part.delta", {"delta": "unheard"}, "ses_a", "/p"))
        await asyncio.sleep(0.05)
        assert len(sent) == 1  # nobody to tell
        database.heard(dumps({"o": "there", "items": []}))  # another process starts
        await until_sent(2)
        assert sent[1] == {"o": "here", "items": [], "s": 0}  # answered at once
        assert not relay.alone
        relay.published(Event("message.part.delta", {"delta": "heard"}, "ses_a", "/p"))
        await until_sent(3)
        assert [item["p"] for item in sent[2]["items"]] == [{"delta": "heard"}]
        database.heard(dumps({"o": "there", "items": []}))  # one it knows: no answer
        await asyncio.sleep(0.05)
        assert len(sent) == 3


async def test_deltas_go_only_to_processes_with_event_streams() -> None:
    """A process that said it has no clients' event streams is sent no streamed deltas (statuses
    still); one that has not said is; a process whose first stream opens says so at once."""
    database = _Recorded()
    sent = database.sent

    def types_sent() -> list[str]:
        return [item["t"] for payload in sent for item in payload["items"]]

    async def published(*events: Event) -> None:
        for event in events:
            relay.published(event)
        await asyncio.sleep(0.05)

    delta = Event("message.part.delta", {"delta": "x"}, "ses_a", "/p")
    next_delta = Event("session.next.text.delta", {"delta": "x"}, "ses_a", "/p")
    status = Event("session.status", {"status": {"type": "busy"}}, "ses_a", "/p")
    async with _running(database, _reads_nothing) as (relay, _seen):
        database.heard(dumps({"o": "there", "items": []}))  # not said whether it has streams
        await published(delta)
        assert types_sent() == ["message.part.delta"]
        sent.clear()
        database.heard(dumps({"o": "there", "items": [], "s": 0}))
        await published(delta, next_delta, status)
        assert types_sent() == ["session.status"]
        database.heard(dumps({"o": "there", "items": [], "s": 1}))
        await published(delta)
        assert types_sent() == ["session.status", "message.part.delta"]
        sent.clear()
        relay.bus.attach(_Stream(), ("directory", "/p"), stream=True)  # a client's first event stream
        await asyncio.sleep(0.05)
        assert sent == [{"o": "here", "items": [], "s": 1}]


async def test_a_commit_is_told_once_durable_in_its_place_among_ephemeral_events() -> None:
    """The others hear of a local commit from the relay after it, not from a NOTIFY inside the
    transaction (PostgreSQL would serialize it with every other notifying commit): its cursor and
    its ephemeral events, in the order the process made them; alone, nobody is told."""
    database = _Recorded()
    busy = Event("session.status", {"status": {"type": "busy"}}, "ses_a", "/p")
    idle = Event("session.idle", {}, "ses_a", "/p")
    async with _running(database, _reads_nothing) as (relay, seen):
        await database.until_sent(1)  # its presence
        relay.committed([_durable(5)])
        assert (await seen.next(5)).cursor == 5  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert len(database.sent) == 1  # alone: nobody to tell
        database.heard(dumps({"o": "there", "items": [], "s": 0}))
        await database.until_sent(2)  # the newcomer is answered
        relay.committed([busy, _durable(7), _durable(8)])
        relay.published(idle)
        relay.committed([_durable(9)])
        await database.until_sent(3)
        await asyncio.sleep(0.05)  # anything sent later is in ``sent`` too
    told = [item for payload in database.sent[2:] for item in payload["items"]]
    assert [item if isinstance(item, int) else item["t"] for item in told] == ["session.status", 8, "session.idle", 9]


async def test_a_commit_nobody_was_told_of_is_published_by_the_poll() -> None:
    """A process that died between its commit and its notification told nobody: the others'
    poll of the log publishes that commit's events within a poll's interval."""
    log: list[Event] = []

    async def since(after: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
        return [e for e in log if after < e.cursor <= upto][:limit], HORIZON

    async with _running(_Notifications(), since) as (_relay, seen):
        log.append(_durable(7))  # committed elsewhere; no notification follows
        event = await seen.next(POLL_SECONDS * 3)
    assert event is not None and event.cursor == 7


async def test_a_stopping_process_first_tells_the_others_what_it_did_last() -> None:
    database = _Recorded()
    async with _running(database, _reads_nothing) as (relay, _seen):
        database.heard(dumps({"o": "there", "items": []}))
        await database.until_sent(2)  # its presence, and its answer to the other process
        relay.committed([_durable(5)])
        relay.published(Event("session.idle", {}, "ses_a", "/p"))
    told = [item for payload in database.sent[2:] for item in payload["items"]]
    assert [item if isinstance(item, int) else item["t"] for item in told] == [5, "session.idle"]


class _Stream:
    def offer(self, event: Event) -> None:
        return None


async def _reads_nothing(after: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
    return [], HORIZON
