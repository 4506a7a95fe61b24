"""Engines at their edges: SQLite serves one process per file, a database that cannot be reached
stops start-up with one clear line and a non-zero status, one lost while running answers 503 and
recovers, and the writer slots let admissions go before drain writes."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from app.store.database import open_database
from app.store.sqlite import SqliteDatabase
from app.store.statement import Statement
from tests.helpers import text_prompt
from tests.postgres import Cluster
from tests.servers import ROOT, free_port, process_server
from tests.sse import EventCollector


def _serve(db: str, directory: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port()), "--db", db]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.slow
def test_a_second_process_on_one_sqlite_file_is_refused(tmp_path: Path, project_dir: Path, config_dir: Path) -> None:
    db = str(tmp_path / "shared.db")
    first = process_server(db, project_dir, config_dir)
    first.start()
    try:
        second = _serve(db, project_dir)
    finally:
        first.stop()
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by opensession pid" in lines[0] and "PostgreSQL" in lines[0]
    assert first.proc is not None and first.proc.returncode is not None  # stopped by us, not crashed


def test_an_unreachable_database_stops_start_up_with_one_line(project_dir: Path) -> None:
    port = free_port()  # nothing listens there
    result = _serve(f"postgresql+asyncpg://user:secret@127.0.0.1:{port}/db", project_dir)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "secret" not in lines[0]


def test_an_unsupported_database_url_is_one_line(project_dir: Path) -> None:
    result = _serve("mysql://localhost/db", project_dir)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("opensession: unsupported database URL")


@functools.cache
def adhoc(text: str) -> Statement:
    """A statement of a test's own, for SQLite only (the server's come from app/store/sql.py); one
    object per text, as statements are compared by identity."""
    return Statement(text, text, text, ())


def _admin(cluster: Cluster, statement: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(f"{cluster.url}/postgres")
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.mark.slow
def test_a_database_lost_while_running_answers_503_then_recovers(
    postgres_cluster: Cluster | None, project_dir: Path, config_dir: Path
) -> None:
    if postgres_cluster is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    url = postgres_cluster.create_database()
    name = url.rsplit("/", 1)[1]
    server = process_server(url, project_dir, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        assert httpx.post(f"{server.url}/session/{sid}/message", json=text_prompt("before")).status_code == 200
        with EventCollector(f"{server.url}/event") as events:
            httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 in flight"))
            events.wait_for(lambda f: f.type == "message.part.delta", timeout=15)
            _admin(postgres_cluster, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            _admin(postgres_cluster, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            lost = httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt("while lost"))
            assert lost.status_code == 503, lost.text
            assert lost.json()["name"] == "DatabaseUnavailableError"
            v2 = httpx.post(f"{server.url}/api/session/{sid}/prompt", json={"prompt": {"text": "while lost"}})
            assert v2.status_code == 503, v2.text  # V2's declared 503
            assert v2.json() == {
                "_tag": "ServiceUnavailableError",
                "message": v2.json()["message"],
                "service": "database",
            }, v2.text
            assert httpx.get(f"{server.url}/global/health").status_code == 200  # the server itself is up
            time.sleep(1.5)  # the turn in flight fails to write meanwhile, and waits
            _admin(postgres_cluster, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            back = httpx.post(f"{server.url}/session/{sid}/message", json=text_prompt("after"), timeout=30)
            assert back.status_code == 200, back.text
        history = httpx.get(f"{server.url}/session/{sid}/message").json()
        users = [m for m in history if m["info"]["role"] == "user"]
        replies = [m for m in history if m["info"]["role"] == "assistant"]
        texts = [p["text"] for m in users for p in m["parts"] if p["type"] == "text"]
        assert texts == ["before", "SLOW:0.3 in flight", "after"]  # the 503'd prompt was not stored
        assert all("completed" in r["info"]["time"] for r in replies), server.log_tail()  # nothing left open
        answered = {r["info"]["parentID"] for r in replies if "error" not in r["info"]}
        assert answered == {u["info"]["id"] for u in users}  # the turn in flight was answered too
    finally:
        server.stop()


async def test_writer_slots_serve_urgent_writers_first_and_never_lose_a_hand_over() -> None:
    """Admissions (urgent) go before drain writes already waiting; within a lane first come, first
    served; a waiter cancelled just as the slot was handed to it passes the slot on."""
    from app.store.database import WriterSlots

    lock = WriterSlots(1)
    await lock.acquire()
    order: list[str] = []

    async def writer(name: str, urgent: bool) -> None:
        await lock.acquire(urgent=urgent)
        order.append(name)
        lock.release()

    tasks = [asyncio.create_task(writer(n, u)) for n, u in (("drain-1", False), ("drain-2", False), ("admit", True))]
    await asyncio.sleep(0)
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["admit", "drain-1", "drain-2"]

    await lock.acquire()
    doomed = asyncio.create_task(lock.acquire())
    follower = asyncio.create_task(writer("after", False))
    await asyncio.sleep(0)
    lock.release()  # handed to ``doomed``...
    doomed.cancel()  # ...which is cancelled before it runs: the lock must reach ``follower``
    await asyncio.wait_for(follower, 1)
    assert order[-1] == "after"
    lock.release()


async def test_writer_slots_let_that_many_writers_in_at_once_and_no_more() -> None:
    from app.store.database import WriterSlots

    slots = WriterSlots(3)
    for _ in range(3):
        await asyncio.wait_for(slots.acquire(), 1)  # three at once: none waits
    fourth = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0.01)
    assert not fourth.done()
    slots.release()
    await asyncio.wait_for(fourth, 1)


async def test_a_postgres_process_runs_as_many_write_transactions_at_once_as_it_is_set_to(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OPENSESSION_DB_WRITERS`` transactions run at once, each on a connection of its own; the
    next waits for one to end (SQLite always runs one)."""
    monkeypatch.setenv("OPENSESSION_DB_WRITERS", "3")
    settings = Settings(db=database_url)
    db = open_database(settings.database_url, writers=settings.db_writers)
    await db.open()
    release = asyncio.Event()
    running: list[int] = []

    async def transaction(index: int) -> None:
        async with db.write() as scope:
            running.append(index)
            scope.execute(adhoc("SELECT 1"), {})
            await release.wait()

    tasks = [asyncio.create_task(transaction(index)) for index in range(4)]
    try:
        await asyncio.sleep(0.3)
        at_once = len(running)
    finally:
        release.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await db.close()
    assert at_once == (3 if db.shared else 1)
    assert outcomes == [None] * 4 and sorted(running) == [0, 1, 2, 3]
    monkeypatch.setenv("OPENSESSION_DB_WRITERS", "0")
    with pytest.raises(ValidationError, match="db_writers"):
        Settings(db=database_url)


async def names_table(path: Path) -> SqliteDatabase:
    """An open SQLite database with one table, ``t (name TEXT)``."""
    db = SqliteDatabase(f"sqlite:///{path}")
    await db.open()
    async with db.write() as scope:
        scope.execute(adhoc("CREATE TABLE t (name TEXT)"), {})
    return db


async def insert_name(db: SqliteDatabase, name: str, *, at_once: bool) -> None:
    async with db.write(at_once=at_once) as scope:
        scope.execute(adhoc("INSERT INTO t (name) VALUES (:name)"), {"name": name})


async def test_drain_writes_wait_while_admissions_are_in_flight_but_not_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-urgent write (a drain's) begins only once the urgent ones in flight (admissions, until
    durable) are done; admissions that never end hold it back no longer than ``HOLD_LIMIT_S``."""
    from app.store.database import UrgentFirst

    db = await names_table(tmp_path / "urgent.db")
    try:
        order: list[str] = []

        async def insert(name: str, *, urgent: bool = False) -> None:
            async with db.write(urgent=urgent) as scope:
                scope.execute(adhoc("INSERT INTO t (name) VALUES (:name)"), {"name": name})
                order.append(f"{name} writes")
            order.append(f"{name} durable")

        # In one loop iteration: the first transaction commits at once, the admission's commit
        # waits for the iteration's end, and the drain comes to write meanwhile.
        tasks = [asyncio.create_task(insert("first")), asyncio.create_task(insert("admission", urgent=True))]
        tasks.append(asyncio.create_task(insert("drain")))
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert order.index("admission durable") < order.index("drain writes"), order
        assert [r[0] for r in await db.fetch(adhoc("SELECT name FROM t ORDER BY rowid"))] == [
            "first",
            "admission",
            "drain",
        ]
    finally:
        await db.close()

    monkeypatch.setattr(UrgentFirst, "HOLD_LIMIT_S", 0.05)
    urgent = UrgentFirst()
    urgent.begin()  # never ends
    await asyncio.wait_for(urgent.yield_to_urgent(), 5)  # held back no longer than the limit
    assert not urgent._held  # and it left nothing behind while the urgent write goes on

    monkeypatch.setattr(UrgentFirst, "HOLD_LIMIT_S", 60)
    urgent.begin()  # two urgent writes in flight now
    held = [asyncio.ensure_future(urgent.yield_to_urgent()) for _ in range(3)]
    urgent.end()
    await asyncio.sleep(0.01)
    assert not any(h.done() for h in held)  # one is still in flight
    urgent.end()
    await asyncio.wait_for(asyncio.gather(*held), 5)  # the last one's end releases every held write


async def test_sqlite_transactions_never_suspend_commit_together_and_keep_the_wal_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite writes run on the loop's thread: between a transaction's check and its write no other
    task runs. The transactions of one loop iteration are committed together, each still atomic on
    its own (one that fails takes nothing else with it), and each caller resumes only once its
    writes are durable. The automatic checkpoint is off on the writer; the WAL is still copied
    back by a thread, so it stays small however much is written."""
    from app.store import sqlite as engine

    monkeypatch.setattr(engine, "CHECKPOINT_EVERY", 5)
    db = engine.SqliteDatabase(f"sqlite:///{tmp_path / 'wal.db'}")
    await db.open()
    try:
        async with db.write() as scope:
            scope.execute(adhoc("CREATE TABLE blob (id INTEGER PRIMARY KEY, body BLOB)"), {})
        interleaved: list[int] = []

        async def bystander() -> None:
            while True:
                interleaved.append(len(interleaved))
                await asyncio.sleep(0)

        async def insert(i: int) -> int:
            async with db.write() as scope:
                seen = len(interleaved)
                rows = await scope.fetch(adhoc("SELECT count(*) FROM blob WHERE id = :id"), {"id": i})
                assert rows[0][0] == 0
                scope.execute(adhoc("INSERT INTO blob (id, body) VALUES (:id, :body)"), {"id": i, "body": b"x" * 8192})
                assert len(interleaved) == seen, "a write transaction let another task run"
            # Resumed only once durable: another connection sees the row.
            return len(await db.fetch(adhoc("SELECT id FROM blob WHERE id = :id"), {"id": i}))

        async def failing() -> None:
            async with db.write() as scope:
                scope.execute(adhoc("INSERT INTO blob (id, body) VALUES (:id, :body)"), {"id": -1, "body": b""})
                await scope.fetch(adhoc("SELECT count(*) FROM blob"))
                raise RuntimeError("changed my mind")

        watcher = asyncio.create_task(bystander())
        for batch in range(30):  # 30 x 20 x 8 KiB: 5 MiB, about 10 MiB of WAL unless checkpointed
            jobs = [insert(batch * 20 + i) for i in range(20)]
            results = await asyncio.gather(*jobs[:10], failing(), *jobs[10:], return_exceptions=True)
            assert isinstance(results[10], RuntimeError)
            assert [r for i, r in enumerate(results) if i != 10] == [1] * 20
            await asyncio.sleep(0.005)  # let a checkpoint finish now and then
            checkpointing = db._writer()._checkpointing
            if batch % 5 == 4 and checkpointing is not None:  # however busy the machine is
                await asyncio.wait_for(checkpointing, 10)
        watcher.cancel()
        assert (await db.fetch(adhoc("SELECT count(*), min(id) FROM blob")))[0] == (600, 0)
        wal = Path(f"{db.path}-wal").stat().st_size
        assert wal < 4 * 1024 * 1024, f"the WAL grew to {wal} bytes: it is not being checkpointed"
    finally:
        await db.close()


async def test_an_at_once_transaction_does_not_wait_for_the_end_of_the_loop_pass(tmp_path: Path) -> None:
    """In one loop pass the first transaction commits at once and those after it wait for the
    pass to end, except an ``at_once`` one (the part a watched stream's first delta opens): it
    commits then, the transactions before it in the group with it."""
    db = await names_table(tmp_path / "at_once.db")
    try:
        resumed: list[str] = []

        async def insert(name: str, *, at_once: bool = False) -> None:
            await insert_name(db, name, at_once=at_once)
            resumed.append(name)

        tasks = [
            asyncio.create_task(insert("first")),
            asyncio.create_task(insert("grouped")),
            asyncio.create_task(insert("at once", at_once=True)),
        ]
        await asyncio.sleep(0)  # one pass: each task runs to the end of its transaction
        assert resumed == ["first", "at once"]
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert resumed == ["first", "at once", "grouped"]
        assert [r[0] for r in await db.fetch(adhoc("SELECT name FROM t ORDER BY rowid"))] == [
            "first",
            "grouped",
            "at once",
        ]
    finally:
        await db.close()


async def test_a_caller_cancelled_while_its_group_commits_stops_only_its_own_wait(tmp_path: Path) -> None:
    """Transactions of one loop pass wait for the same commit, each on a future of its own: one
    whose caller is cancelled meanwhile still commits (it had ended), and the others resume."""
    db = await names_table(tmp_path / "cancelled.db")
    try:
        tasks = [asyncio.create_task(insert_name(db, name, at_once=False)) for name in ("a", "b", "c")]
        await asyncio.sleep(0)  # "a" committed at once; "b" and "c" wait for the pass to end
        tasks[1].cancel()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], asyncio.CancelledError)
        assert [r[0] for r in await db.fetch(adhoc("SELECT name FROM t ORDER BY rowid"))] == ["a", "b", "c"]
    finally:
        await db.close()


async def test_a_failing_transaction_that_held_up_a_group_commit_still_lets_it_commit(tmp_path: Path) -> None:
    """Transactions that ended in one loop iteration after the first wait for its end; if one
    still open then (it awaits something) fails instead of ending, the others commit all the same
    and their callers resume."""
    from app.store import sqlite as engine

    db = engine.SqliteDatabase(f"sqlite:///{tmp_path / 'group.db'}")
    await db.open()
    try:
        async with db.write() as scope:
            scope.execute(adhoc("CREATE TABLE t (id INTEGER PRIMARY KEY)"), {})
        release = asyncio.Event()

        async def insert(i: int) -> None:
            async with db.write() as scope:
                scope.execute(adhoc("INSERT INTO t (id) VALUES (:id)"), {"id": i})

        async def slow_and_failing() -> None:
            async with db.write() as scope:
                scope.execute(adhoc("INSERT INTO t (id) VALUES (:id)"), {"id": 99})
                await release.wait()  # open across the end of the iteration the others ended in
                raise RuntimeError("gave up")

        first, second = asyncio.create_task(insert(1)), asyncio.create_task(insert(2))
        failing = asyncio.create_task(slow_and_failing())
        for _ in range(3):
            await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        with pytest.raises(RuntimeError):
            await failing
        assert [row[0] for row in await db.fetch(adhoc("SELECT id FROM t ORDER BY id"))] == [1, 2]
    finally:
        await db.close()


def _quick_statements() -> dict[str, Statement]:
    from app.store import sql

    return {name: value for name, value in vars(sql).items() if isinstance(value, Statement) and value.quick}


async def test_quick_reads_run_inline_and_see_only_committed_writes(tmp_path: Path) -> None:
    """A quick read (a keyed lookup) completes without suspending, on a connection of its own: it
    sees what is committed, never a transaction still open. Other reads go to a reader thread."""
    from app.store import sql

    db = SqliteDatabase(f"sqlite:///{tmp_path / 'quick.db'}")
    await db.open()
    try:
        info = '{"id": "ses_1"}'
        row = {"id": "ses_1", "directory": "/d", "parent_id": None, "title": "t", "time_created": 1}
        async with db.write() as scope:
            scope.execute(sql.UPSERT_SESSION, row | {"time_updated": 1, "info": info})

        def completes_without_suspending(read: Any) -> Any:
            coroutine = read.__await__()
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            coroutine.close()
            raise AssertionError("the read suspended")

        assert completes_without_suspending(db.fetch(sql.SESSION_INFO, {"id": "ses_1"})) == [(info,)]
        async with db.write() as scope:
            scope.execute(sql.UPSERT_SESSION, row | {"time_updated": 2, "info": '{"id": "ses_1", "v": 2}'})
            await scope.flush()
            assert completes_without_suspending(db.fetch(sql.SESSION_INFO, {"id": "ses_1"})) == [(info,)]
        assert await db.fetch(sql.SESSION_INFO, {"id": "ses_1"}) == [('{"id": "ses_1", "v": 2}',)]
        listing = db.fetch(
            sql.session_list(directory=False, roots=False, parent=False, start=False, search=False, limit=False), {}
        )
        with pytest.raises(AssertionError, match="suspended"):
            completes_without_suspending(listing)
    finally:
        await db.close()


@pytest.mark.parametrize("name", sorted(_quick_statements()))
def test_a_quick_read_never_scans_a_table(tmp_path: Path, name: str) -> None:
    """What runs inline on the loop's thread must stay small whatever the database holds: every
    table it reads is searched through an index (a scan of a materialized result is no table's:
    its rows were searched for)."""
    import re
    import sqlite3

    from sqlalchemy import create_engine

    from app.store.schema import metadata

    engine = create_engine(f"sqlite:///{tmp_path / 'plan.db'}")
    metadata.create_all(engine)
    engine.dispose()
    statement = _quick_statements()[name]
    with sqlite3.connect(tmp_path / "plan.db") as conn:
        params = dict.fromkeys(re.findall(r":(\w+)", statement.sqlite), 1)
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement.sqlite}", params)]
    materialized = {step.split()[1] for step in plan if step.startswith("MATERIALIZE ")}
    scans = [step for step in plan if step.startswith("SCAN") and step.split()[1] not in materialized]
    assert plan and not scans, plan
