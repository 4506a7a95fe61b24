"""Concurrent writers on PostgreSQL, with no lock serializing them: two event logs on one
database (two processes, as far as the database can tell: their own connections, buses and
relays), each running many write transactions at once that overlap and commit out of cursor
order. What must hold:

- a reader following the log by cursor, while it is written, misses no event (the log is read
  only below the oldest transaction still running);
- every process's bus publishes every event exactly once, in cursor order;
- a session's seq is gap-free, whoever writes it, and its events are in seq order in cursor order
  (a transaction is numbered once it holds the session);
- a read-modify-write under a hold loses no concurrent change.

Each writer sleeps inside its transaction, so transactions that began later commit first."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from app.events.bus import EventBus
from app.events.log import EventLog
from app.events.model import Event
from app.store import project_settings
from app.store.database import Database, open_database
from app.store.postgres import PostgresDatabase
from tests.postgres import Cluster

WRITERS_PER_LOG = 12
TRANSACTIONS_PER_WRITER = 8
SESSIONS = 4


class RecordingBus(EventBus):
    def __init__(self) -> None:
        super().__init__(queue_size=100_000)
        self.durable: list[int] = []

    def publish(self, event: Event) -> None:
        if event.durable:
            self.durable.append(event.cursor)
        super().publish(event)


@pytest.fixture
async def two_logs(postgres_cluster: Cluster | None) -> AsyncIterator[list[EventLog]]:
    if postgres_cluster is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    url = await asyncio.to_thread(postgres_cluster.create_database)  # it runs a loop of its own
    databases: list[Database] = []
    logs: list[EventLog] = []
    for _ in range(2):
        db = open_database(url)
        await db.open()
        databases.append(db)
        log = EventLog(db, RecordingBus())
        await log.start()
        logs.append(log)
    try:
        yield logs
    finally:
        for log, db in zip(logs, databases, strict=True):
            await log.stop()
            await db.close()


async def _write(log: EventLog, name: str, rng: random.Random) -> None:
    for index in range(TRANSACTIONS_PER_WRITER):
        session = f"ses_{rng.randrange(SESSIONS)}"  # several writers on each session at once
        # Held from the transaction's first statement (a drain's, an admission's), or by its
        # first event (an edit through the API).
        async with log.transaction(hold=session if rng.random() < 0.5 else None) as tx:
            for _ in range(rng.randint(1, 3)):
                await tx.emit("test.tick", {"by": name, "n": index}, session_id=session, directory="/d")
            await asyncio.sleep(rng.random() * 0.01)  # others begin and commit meanwhile


async def _follow(log: EventLog, stop: asyncio.Event, seen: list[int]) -> None:
    cursor = 0
    while True:
        done = stop.is_set()  # read once more after the writers are done
        for event in await log.since(cursor):
            seen.append(event.cursor)
            cursor = event.cursor
        if done:
            return
        await asyncio.sleep(0.001)


async def test_overlapping_writers_on_two_logs_leave_no_gap_for_readers_buses_or_sessions(
    two_logs: list[EventLog],
) -> None:
    rng = random.Random(7)
    stop = asyncio.Event()
    followed: list[int] = []
    follower = asyncio.create_task(_follow(two_logs[0], stop, followed))
    await asyncio.gather(
        *(
            _write(log, f"{which}-{writer}", random.Random(rng.random()))
            for which, log in enumerate(two_logs)
            for writer in range(WRITERS_PER_LOG)
        )
    )
    stop.set()
    await asyncio.wait_for(follower, 30)

    logged = await _all(two_logs[1])
    every = [event.cursor for event in logged]
    assert len(every) >= 2 * WRITERS_PER_LOG * TRANSACTIONS_PER_WRITER
    assert every == sorted(every)
    for number in range(SESSIONS):  # cursor order, the order every process publishes in, keeps seq order
        in_cursor_order = [event.seq or 0 for event in logged if event.session_id == f"ses_{number}"]
        assert in_cursor_order == sorted(in_cursor_order), f"ses_{number}: {in_cursor_order}"
    assert followed == every, f"the follower missed {sorted(set(every) - set(followed))[:10]}"

    for log in two_logs:  # each bus: every event once, in cursor order
        bus = log.bus
        assert isinstance(bus, RecordingBus)
        deadline = asyncio.get_running_loop().time() + 10
        while bus.durable[-1:] != every[-1:]:
            assert asyncio.get_running_loop().time() < deadline, (len(bus.durable), len(every))
            await asyncio.sleep(0.02)
        assert bus.durable == every

    for number in range(SESSIONS):
        seqs = [event.seq for event in await two_logs[0].session_since(f"ses_{number}", -1, limit=100_000)]
        assert seqs == list(range(len(seqs)))


async def _all(log: EventLog) -> list[Event]:
    events: list[Event] = []
    while batch := await log.since(events[-1].cursor if events else 0):
        events += batch
    return events


async def test_a_read_modify_write_under_a_hold_loses_no_concurrent_change(two_logs: list[EventLog]) -> None:
    async def increment(db: Database) -> None:
        async with db.write() as scope:
            stored = await project_settings.settings_to_change(scope, "prj_counter")
            count = stored[0]["count"] if stored else 0
            await asyncio.sleep(0.002)  # the others read meanwhile, unless held
            project_settings.save_settings(scope, "prj_counter", {"count": count + 1}, count + 1)

    await asyncio.gather(*(increment(log.db) for log in two_logs for _ in range(20)))
    stored = await project_settings.settings(two_logs[0].db, "prj_counter")
    assert stored is not None and stored[0]["count"] == 40


async def test_transactions_of_one_session_queue_in_the_process_not_on_writer_connections(
    two_logs: list[EventLog],
) -> None:
    """Transactions holding one session wait for each other before they take a writer connection:
    waiting on the session's hold inside the database would occupy a connection each."""
    log = two_logs[0]
    db = log.db
    assert isinstance(db, PostgresDatabase)
    peak = 0

    async def one(index: int) -> None:
        nonlocal peak
        async with log.transaction(hold="ses_busy") as tx:
            peak = max(peak, len(db._busy))
            await tx.emit("test.tick", {"n": index}, session_id="ses_busy", directory="/d")
            await asyncio.sleep(0.01)

    await asyncio.gather(*(one(i) for i in range(6)))
    assert peak == 1
    assert [e.seq for e in await log.session_since("ses_busy", -1)] == list(range(6))
