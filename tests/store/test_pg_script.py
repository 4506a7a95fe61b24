"""Transactions sent as scripts on PostgreSQL (``app.store.pg_script``, ``app.store.postgres``):
values rendered into the text must mean exactly what the same values bound as parameters mean,
whatever they contain, and a transaction must take as few round trips as it claims."""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from app.store import events, pg_script, sql
from app.store.database import DatabaseUnavailable, Queued, open_database
from app.store.postgres import PostgresDatabase

HOSTILE_TEXTS = [
    "",
    "plain",
    "it's",
    "''",
    "back\\slash",
    "\\'; DROP TABLE sessions; --",
    "E'\\x41'",
    "$1 $2 $$ $tag$ dollar $tag$",
    "line\nbreak\ttab\r",
    "unicode: é ü 中文 🙂",
    '{"json": "with \\"quotes\\" and \\\\ backslashes"}',
    "-- not a comment",
    "/* not a comment */",
]
NUMBERS = [0, 1, -1, 2**62, -(2**62), 1.5, -2.25, 1e-300, float("inf"), float("-inf")]


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[PostgresDatabase]:
    db = open_database(pg_url)
    assert isinstance(db, PostgresDatabase)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def record_scripts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the writers send through the simple query protocol from now on, in order."""
    sent: list[str] = []
    original = asyncpg.Connection.execute

    async def counted(self: asyncpg.Connection, query: str, *args: object, **kwargs: object) -> str:
        sent.append(query)
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", counted)
    return sent


def test_values_the_store_never_binds_are_not_rendered() -> None:
    for journal in (b"bytes", ["a"], "a\x00'; --"):
        assert pg_script.Prepared().script([(sql.SAVE_REVERT, {"session_id": "s", "journal": journal})]) is None
    assert pg_script.literal(-3) == "(-3)"  # "x-$1" must not become the comment "x--3"


async def test_rendered_values_read_back_as_the_bound_ones(pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        for setting in ("on", "off"):  # escape strings mean the same either way
            await conn.execute(f"SET standard_conforming_strings = {setting}")
            for text in HOSTILE_TEXTS:
                assert await conn.fetchval(f"SELECT {pg_script.literal(text)}::text") == text
            for number in NUMBERS:
                kind = "float8" if isinstance(number, float) else "bigint"
                assert await conn.fetchval(f"SELECT 10 - {pg_script.literal(number)}::{kind}") == 10 - number
            assert math.isnan(await conn.fetchval(f"SELECT {pg_script.literal(float('nan'))}"))
            for value in (None, True, False):
                assert await conn.fetchval(f"SELECT {pg_script.literal(value)}::boolean") is value
    finally:
        await conn.close()


async def test_a_transaction_stores_hostile_values_exactly(pg: PostgresDatabase) -> None:
    rows = [{"session_id": f"ses_{i}", "todos": text} for i, text in enumerate(HOSTILE_TEXTS)]
    async with pg.write() as scope:
        for row in rows:
            scope.execute(sql.UPSERT_TODOS, row)
    for row in rows:
        stored = await pg.fetch(sql.TODOS, {"session_id": row["session_id"]})
        assert stored[0][0] == row["todos"]


async def test_a_run_of_one_row_inserts_is_one_statement_until_an_upsert_meets_its_row_again(
    pg: PostgresDatabase,
) -> None:
    """A transaction's events (hostile texts among them) go as one multi-row INSERT and read back
    exactly; an upsert between them ends the run; upserts of two rows go as one statement, and an
    upsert of a row already in the statement begins another (merged, PostgreSQL would refuse to
    change the row twice)."""
    rows = [
        {
            "id": cursor,
            "event_id": f"evt_{cursor}",
            "session_id": "ses_a",
            "directory": text,
            "seq": cursor,
            "type": "t",
            "data": text,
            "time": -cursor,
        }
        for cursor, text in enumerate(HOSTILE_TEXTS, start=1)
    ]
    upsert: dict[str, object] = {"session_id": "ses_a", "todos": "[1]"}
    queued: Queued = [(sql.INSERT_EVENT, row) for row in rows[:-1]]
    queued += [
        (sql.UPSERT_TODOS, upsert),
        (sql.UPSERT_TODOS, {"session_id": "ses_b", "todos": "[3]"}),
        (sql.UPSERT_TODOS, upsert | {"todos": "[2]"}),
        (sql.INSERT_EVENT, rows[-1]),
    ]
    script = pg_script.Prepared().script(queued)
    assert script is not None
    texts = [text for text in script.texts if text.startswith("EXECUTE")]  # after their PREPAREs
    assert len(texts) == 4, script.texts
    assert "ses_b" in texts[1] and "ses_b" not in texts[2]
    async with pg.write() as scope:
        for statement, params in queued:
            scope.execute(statement, params)
    stored = await events.settled_up_to(pg, 0, len(rows), 100, [])
    assert [(r[0], r[3], r[6], r[7]) for r in stored[0]] == [
        (r["id"], r["directory"], r["data"], r["time"]) for r in rows
    ]
    assert (await pg.fetch(sql.TODOS, {"session_id": "ses_a"}))[0][0] == "[2]"
    assert (await pg.fetch(sql.TODOS, {"session_id": "ses_b"}))[0][0] == "[3]"


async def test_a_transaction_of_writes_is_one_round_trip_and_a_failed_one_leaves_nothing(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pg.write() as scope:  # the first transaction of a connection sends its BEGIN too
        scope.execute(sql.UPSERT_TODOS, {"session_id": "warm", "todos": "[]"})
    sent = record_scripts(monkeypatch)
    async with pg.write() as scope:
        await scope.hold("ses_a")
        scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_a", "todos": "[1]"})
        scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_b", "todos": "[2]"})
    assert len(sent) == 1 and sent[0].endswith("COMMIT;\nBEGIN"), sent
    assert "pg_advisory_xact_lock" in sent[0]

    sent.clear()
    with pytest.raises(asyncpg.PostgresError):
        async with pg.write() as scope:
            scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_c", "todos": "[3]"})
            scope.execute(sql.UPSERT_TODOS, {"session_id": None, "todos": "[4]"})  # NOT NULL
    assert await pg.fetch(sql.TODOS, {"session_id": "ses_c"}) == []
    async with pg.write() as scope:  # the connection is usable again
        scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_d", "todos": "[5]"})
    assert (await pg.fetch(sql.TODOS, {"session_id": "ses_d"}))[0][0] == "[5]"

    sent.clear()
    async with pg.write():
        pass  # nothing ran: nothing is sent
    assert sent == []


async def test_a_statement_is_prepared_once_per_connection_and_again_after_a_script_that_failed(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer prepares each statement (and row count) it sends the first time, then only
    executes it; a failed script may or may not have run its PREPAREs, and the statements it was
    to prepare are prepared again, under new names, by the next script that uses them."""
    sent = record_scripts(monkeypatch)

    async def write(*rows: tuple[str | None, str]) -> None:
        sent.clear()
        async with pg.write() as scope:
            for session_id, todos in rows:
                scope.execute(sql.UPSERT_TODOS, {"session_id": session_id, "todos": todos})

    async def todos(session_id: str) -> str | None:
        found = await pg.fetch(sql.TODOS, {"session_id": session_id})
        return found[0][0] if found else None

    await write(("ses_a", "[1]"), ("ses_b", "[2]"))
    assert sent[-1].count("PREPARE") == 1 and "INSERT INTO todos" in sent[-1], sent
    await write(("ses_c", "[3]"), ("ses_a", "[4]"))  # the same shape: executed, not prepared again
    assert "PREPARE" not in sent[-1] and "INSERT INTO todos" not in sent[-1] and "EXECUTE" in sent[-1], sent
    assert [await todos(s) for s in ("ses_a", "ses_b", "ses_c")] == ["[4]", "[2]", "[3]"]

    # Three rows, a new shape: its PREPARE runs, then its EXECUTE fails (NOT NULL).
    with pytest.raises(asyncpg.PostgresError):
        await write(("ses_d", "[5]"), ("ses_e", "[6]"), (None, "[7]"))
    # Four rows, a new shape, after a statement that fails: its PREPARE never runs.
    with pytest.raises(asyncpg.PostgresError):
        async with pg.write() as scope:
            scope.execute(sql.UPSERT_TODOS, {"session_id": None, "todos": "[8]"})
            scope.execute(sql.SAVE_REVERT, {"session_id": "ses_f", "journal": "{}"})
            for session_id in ("ses_f", "ses_g", "ses_h", "ses_i"):
                scope.execute(sql.UPSERT_TODOS, {"session_id": session_id, "todos": "[9]"})
    assert await todos("ses_d") is None and await todos("ses_f") is None
    await write(("ses_d", "[10]"), ("ses_e", "[11]"), ("ses_j", "[12]"))
    await write(*((s, "[13]") for s in ("ses_f", "ses_g", "ses_h", "ses_i")))
    assert [await todos(s) for s in ("ses_d", "ses_e", "ses_j", "ses_f", "ses_i")] == [
        "[10]",
        "[11]",
        "[12]",
        "[13]",
        "[13]",
    ]


async def test_a_writer_connection_the_server_closed_while_idle_is_replaced(pg_url: str) -> None:
    """Writer connections wait with an empty transaction open (COMMIT begins the next), and the
    server ends transactions idle past the stall limit: the next write opens a new connection and
    succeeds."""
    db = open_database(pg_url, stalled_after_s=0.2)
    await db.open()
    try:
        for round_ in range(3):
            async with db.write() as scope:
                scope.execute(sql.UPSERT_TODOS, {"session_id": f"ses_{round_}", "todos": "[]"})
            await asyncio.sleep(0.5)  # longer than the limit: the server closes the idle writer
            assert isinstance(db, PostgresDatabase) and all(w.conn.is_closed() for w in db._idle)
        assert [len(await db.fetch(sql.TODOS, {"session_id": f"ses_{i}"})) for i in range(3)] == [1, 1, 1]
    finally:
        await db.close()


async def test_a_writer_idle_for_half_the_stall_limit_is_renewed_not_reopened(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle writer waits in an empty transaction, which the server ends at the stall limit:
    one silent for half of it begins a new transaction with its next script (no connection
    opened, no round trip added), so a server that writes now and then keeps its connections;
    one silent for most of it is replaced rather than raced."""
    db = open_database(pg_url, stalled_after_s=1.0)
    await db.open()
    assert isinstance(db, PostgresDatabase)
    try:

        async def write(key: str) -> asyncpg.Connection:
            async with db.write() as scope:
                await scope.hold(key)
                scope.execute(sql.UPSERT_TODOS, {"session_id": key, "todos": "[]"})
            return db._idle[-1].conn

        first = await write("ses_0")
        sent = record_scripts(monkeypatch)
        for round_ in range(1, 4):
            await asyncio.sleep(0.6)  # past half the limit: renewed; the server's clock restarts
            assert await write(f"ses_{round_}") is first
        assert len(sent) == 3 and all(text.startswith("COMMIT;\nBEGIN;\n") for text in sent), sent
        await asyncio.sleep(0.9)  # most of the limit: replaced
        assert await write("ses_4") is not first
        assert [len(await db.fetch(sql.TODOS, {"session_id": f"ses_{i}"})) for i in range(5)] == [1] * 5
    finally:
        await db.close()


async def test_a_writer_stalled_mid_transaction_gives_up_its_session_holds(pg_url: str) -> None:
    """A process frozen inside a write transaction (stopped, swapped out, cut off) must not keep
    its session's hold for as long as the freeze lasts: another process taking the session over
    waits on that hold. Past the stall limit the server ends the stalled connection, the waiting
    hold is granted, and the stalled transaction commits nothing."""
    db = open_database(pg_url, stalled_after_s=1.0)
    await db.open()
    other = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        async with db.write() as scope:  # a writer that has sent BEGIN, as every idle one has
            scope.execute(sql.UPSERT_TODOS, {"session_id": "warm", "todos": "[]"})

        async def stall() -> None:
            async with db.write() as scope:
                await scope.hold("ses_frozen")
                await scope.fetch(sql.TODOS, {"session_id": "ses_frozen"})  # the hold is taken now
                await asyncio.sleep(3.0)  # frozen: the event loop of a stopped process runs nothing
                scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_frozen", "todos": "[1]"})

        stalled = asyncio.create_task(stall())
        await asyncio.sleep(0.3)
        began = asyncio.get_running_loop().time()
        async with other.transaction():  # the taker's claim waits on the session's hold
            await other.execute(pg_script.statement_text(sql.HOLD, {"key": "ses_frozen"}))
        waited = asyncio.get_running_loop().time() - began
        assert 0.4 < waited < 2.5, waited  # granted once the limit ended the stalled connection
        with pytest.raises(DatabaseUnavailable):
            await stalled
        assert await db.fetch(sql.TODOS, {"session_id": "ses_frozen"}) == []
        async with db.write() as scope:  # and the process writes again on a new connection
            scope.execute(sql.UPSERT_TODOS, {"session_id": "ses_after", "todos": "[]"})
        assert len(await db.fetch(sql.TODOS, {"session_id": "ses_after"})) == 1
    finally:
        await other.close()
        await db.close()


async def test_a_commit_whose_answer_is_lost_is_looked_up_not_guessed(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server stopping ends each connection before its next statement: a commit's own answer
    can be lost after it took effect (the BEGIN sent with it is refused). The writer asks the
    database what became of the transaction: stored is a success, whatever the connection said,
    and a transaction cut off before its COMMIT is reported lost and left nothing behind."""
    original = asyncpg.Connection.execute
    cut: list[str] = []  # where the next commit script loses its connection: before or after COMMIT

    async def cut_off(self: asyncpg.Connection, query: str, *args: object, **kwargs: object) -> str:
        if cut and query.endswith("COMMIT;\nBEGIN"):
            end = "SELECT pg_terminate_backend(pg_backend_pid())"
            query = query.replace("COMMIT;", f"COMMIT;\n{end};") if cut.pop() == "after" else f"{query[:-14]};\n{end}"
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", cut_off)

    async def write(session_id: str, *, with_id: bool = True) -> None:
        async with pg.write() as scope:
            if with_id:  # as every event-log transaction that holds a session does
                await events.write_head(scope, session_id)
            scope.execute(sql.UPSERT_TODOS, {"session_id": session_id, "todos": "[]"})

    async def stored(session_id: str) -> bool:
        return bool(await pg.fetch(sql.TODOS, {"session_id": session_id}))

    cut.append("after")
    await write("ses_after")  # no error: it committed
    assert await stored("ses_after")
    cut.append("before")
    with pytest.raises(DatabaseUnavailable):
        await write("ses_before")
    assert not await stored("ses_before")
    cut.append("after")
    with pytest.raises(DatabaseUnavailable):  # without its id nobody can tell: reported lost
        await write("ses_unknown", with_id=False)  # (one that holds no session: it writes no event)
    await write("ses_next")  # a new connection replaces the lost one
    assert await stored("ses_next")


async def test_a_connection_its_server_ended_is_not_handed_on(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server shutting down answers a statement with ``AdminShutdownError`` and ends the
    connection: that connection is closed, not handed to the next caller (which found asyncpg
    stuck mid-operation on one, a 500, while PostgreSQL restarted under load: bench/chaos.py).
    A statement alone and a notification borrow their connections the same way."""
    used: list[asyncpg.Connection] = []
    fetch, execute = asyncpg.Connection.fetch, asyncpg.Connection.execute

    def refusing_first(original: Any) -> Any:
        async def call(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
            used.append(self)
            if len(used) % 2:  # the first of each pair of calls: as if the server shut down
                raise asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command")
            return await original(self, *args, **kwargs)

        return call

    monkeypatch.setattr(asyncpg.Connection, "fetch", refusing_first(fetch))
    monkeypatch.setattr(asyncpg.Connection, "execute", refusing_first(execute))
    with pytest.raises(DatabaseUnavailable):
        await pg.execute_alone(sql.MAX_CURSOR, {})
    assert await pg.execute_alone(sql.MAX_CURSOR, {}) == [(0,)]
    with pytest.raises(DatabaseUnavailable):
        await pg.notify("opensession_test", "refused")
    await pg.notify("opensession_test", "sent")
    assert used[0] is not used[1] and used[2] is not used[3]
    assert used[0].is_closed() and used[2].is_closed()


async def test_a_read_on_a_connection_asyncpg_finds_busy_is_made_again_on_another(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg refuses to begin a statement on a connection it still finds busy (nothing runs):
    that connection is closed and the read answered on another, not failed with a 500."""
    used: list[asyncpg.Connection] = []
    fetch = asyncpg.Connection.fetch

    async def busy_first(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        used.append(self)
        if len(used) == 1:
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        return await fetch(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetch", busy_first)
    assert await pg.fetch(sql.MAX_CURSOR) == [(0,)]
    assert len(used) == 2 and used[0] is not used[1] and used[0].is_closed()


async def test_reads_on_connections_the_server_ended_are_503s_not_500s(pg: PostgresDatabase, pg_url: str) -> None:
    """PostgreSQL ending idle connections (a restart does it to all of them at once): a read on
    one is made again on another, and where that fails too the caller is told the database is
    unavailable (a 503), never an error of the driver's (a 500). asyncpg refuses a statement on a
    connection whose end it has half read; each trial here ends every reader connection and
    reads at once."""
    admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        for _ in range(40):
            reads = await asyncio.gather(*(pg.fetch(sql.MAX_CURSOR) for _ in range(3)), return_exceptions=True)
            pids = [conn.get_server_pid() for conn in pg._readers._idle]
            await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids)
            reads += await asyncio.gather(pg.fetch(sql.MAX_CURSOR), return_exceptions=True)
            for read in reads:
                outcomes[type(read).__name__ if isinstance(read, BaseException) else "rows"] += 1
    finally:
        await admin.close()
    assert set(outcomes) <= {"rows", "DatabaseUnavailable"}, outcomes
    assert outcomes["rows"] >= 120, outcomes  # one read alone on a connection ended is made again


async def test_a_read_every_connection_of_which_asyncpg_finds_busy_is_a_503(
    pg: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def busy(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        raise asyncpg.exceptions.InternalClientError("cannot switch to state 11; another operation (2) is in progress")

    monkeypatch.setattr(asyncpg.Connection, "fetch", busy)
    with pytest.raises(DatabaseUnavailable):
        await pg.fetch(sql.MAX_CURSOR)
