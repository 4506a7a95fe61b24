"""The cluster relay's one publishing order (``app.events.relay``), with the log it reads back
stood in for: what a process queued is published in that order, and a backlog of commits is read
back in as few reads as that order allows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from app.events.bus import EventBus
from app.events.model import Event
from app.events.relay import ClusterRelay
from app.store.database import Params, Row
from app.store.statement import Statement

HORIZON = 1000  # every commit below has settled


class _Notifications:
    """The relay's database where nothing is read but the settled horizon (its poll)."""

    async def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        return None

    async def ensure_listening(self) -> None:
        return None

    async def notify(self, channel: str, *payloads: str) -> None:
        return None

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        return [(HORIZON,)]


def _durable(cursor: int) -> Event:
    return Event("message.updated", {}, "ses_a", "/p", durable=True, seq=cursor, cursor=cursor)


async def test_a_backlog_of_commits_is_read_back_once_between_ephemeral_events() -> None:
    log = {cursor: _durable(cursor) for cursor in range(1, 7)}
    reads: list[tuple[int, int]] = []

    async def since(after: int, upto: int, limit: int) -> tuple[list[Event], int]:
        reads.append((after, upto))
        return [event for cursor, event in sorted(log.items()) if after < cursor <= upto][:limit], HORIZON

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
