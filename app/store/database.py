"""The database: one interface over two engines, SQLite (the embedded default, ``app.store.sqlite``)
and PostgreSQL (``app.store.postgres``), with schema migrations through Alembic.

Why not SQLAlchemy's async engine on the hot path: through its adapters every statement costs
several hand-offs to the driver, which alone exceeded the latency targets (see bench/).
Statements are still built with SQLAlchemy Core (``app.store.clauses``), compiled ahead for both
dialects (``app.store.sql``, ``Statement`` values, the only thing this API takes); here each one is
a single driver call, and a write transaction's statements are batched (``executemany``).

Invariants, on both engines:
- SQLite: this process writes through exactly one writer connection, so its write transactions
  are serialized and commit in the order they took it. PostgreSQL: up to ``writers`` transactions
  at once, each on a writer connection of its own; what must not interleave (a session's events,
  a read-modify-write) takes ``WriteScope.hold`` on its key. Readers use their own connections.
- Callbacks registered with ``WriteScope.after_commit`` run once the transaction's writes are
  visible to the transactions after it, before the lock is released (in-memory caches of rows);
  those registered with ``when_durable`` run once they are durable, in the order the transactions
  committed, so live fan-out follows commit order. On PostgreSQL both happen at the commit; SQLite
  commits the transactions of one event-loop iteration together (``app.store.sqlite``).
- A cancelled caller never leaves a half-finished commit on the shared writer connection.
"""

from __future__ import annotations

import asyncio
import re
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, Protocol

import migrations
from app.observability import metrics
from app.store.statement import Statement

MIGRATIONS_DIR = Path(migrations.__file__).parent
READERS = 3

Params = dict[str, Any]
Row = Sequence[Any]


class UnsupportedDatabase(ValueError):
    """The URL names a database this version cannot serve from."""


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached (or was lost): the message says which and why."""


def _head_revision() -> str:
    """The newest migration, read from the version files without importing Alembic (start-up time)."""
    revisions: dict[str, str | None] = {}
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        text = path.read_text()
        rev = re.search(r'^revision = "([^"]+)"', text, re.M)
        down = re.search(r"^down_revision = (?:\"([^\"]+)\"|None)", text, re.M)
        if rev:
            revisions[rev.group(1)] = down.group(1) if down else None
    heads = set(revisions) - {d for d in revisions.values() if d}
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {sorted(heads)}")
    return heads.pop()


Queued = list[tuple[Statement, Params]]


class Driver(Protocol):
    """One connection as an engine drives it, with statements from ``app.store.sql``."""

    async def run(self, statement: Statement, params: Params) -> None: ...

    async def run_many(self, statement: Statement, rows: list[Params]) -> None: ...

    async def rows(self, statement: Statement, params: Params) -> list[Row]: ...

    async def send(self, queued: Queued) -> None:
        """Run the statements, in order (as few round trips as the engine allows)."""
        ...

    async def hold(self, key: str) -> None:
        """Wait until no other open transaction holds ``key``, and hold it to the end of this one."""
        ...


class Writer(Driver, Protocol):
    """A writer connection with a transaction open on it (``Database._begin``)."""

    async def commit(self, queued: Queued, transaction_id: int | None) -> None:
        """Run the transaction's last statements and COMMIT. ``transaction_id``: the database's
        id of the transaction, if it was read (``WriteScope.transaction_id``)."""
        ...

    async def rollback(self) -> None:
        """ROLLBACK; a failed rollback is swallowed (the error that caused it is the one raised)."""
        ...


def _commuting_segments(queued: Queued) -> list[Queued]:
    """Split the queue into runs of commuting and of other statements, and regroup each commuting
    run by statement: a fork's thousands of alternating message/part upserts become two
    executemany calls instead of thousands of round trips. Other runs keep their order."""
    segments: list[Queued] = []
    commuting: dict[Statement, Queued] = {}
    ordered: Queued = []
    for item in queued:
        if item[0].commutes:
            if ordered:
                segments.append(ordered)
                ordered = []
            commuting.setdefault(item[0], []).append(item)
        else:
            if commuting:
                segments.append([entry for group in commuting.values() for entry in group])
                commuting = {}
            ordered.append(item)
    if commuting:
        segments.append([entry for group in commuting.values() for entry in group])
    if ordered:
        segments.append(ordered)
    return segments


async def send_in_groups(driver: Driver, queued: Queued) -> None:
    """``Driver.send`` through ``run`` and ``run_many``: consecutive uses of one statement (after
    regrouping commuting upserts) become one ``executemany``."""
    for segment in _commuting_segments(queued):
        start = 0
        while start < len(segment):
            statement = segment[start][0]
            end = start + 1
            while end < len(segment) and segment[end][0] is statement:
                end += 1
            if end - start == 1:
                await driver.run(statement, segment[start][1])
            else:
                await driver.run_many(statement, [params for _, params in segment[start:end]])
            start = end


class Reader(Protocol):
    """What a store function reads through: the database (what is committed) or an open write
    transaction (``WriteScope``: its own queued writes too)."""

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]: ...


class WriteScope:
    """An open write transaction. Statements are queued and sent in batches (consecutive uses of
    one statement become one ``executemany``); reads through ``fetch`` see queued writes."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._queued: Queued = []
        self._appended: Queued = []
        self._in_flight: asyncio.Future[None] | None = None
        self.callbacks: list[Callable[[], None]] = []
        self.durable_callbacks: list[Callable[[], None]] = []
        # The database's id of this transaction, once read (a shared database's write head): a
        # commit whose answer is lost with the connection is then looked up, not guessed.
        self.transaction_id: int | None = None

    def execute(self, statement: Statement, params: Params) -> None:
        self._queued.append((statement, params))

    def append(self, statement: Statement, params: Params) -> None:
        """Queue an insert into an append-only table (the event log). Appends never conflict with
        the other statements of the transaction, so they are sent last, as one batch."""
        self._appended.append((statement, params))

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        await self.flush()
        return await self._driver.rows(statement, params or {})

    async def hold(self, key: str) -> None:
        """Serialize with every other transaction holding ``key`` (a session id, a project id)
        from here to the commit: a read-modify-write under it loses no concurrent change. Free
        where the engine runs one write transaction at a time (SQLite)."""
        await self.flush()
        await self._driver.hold(key)

    async def send_ahead(self) -> None:
        """Start sending everything queued so far while the caller prepares more (a large copy):
        the driver writes one batch while Python builds the next. Batches stay in order; the next
        flush (or the commit) waits for them and re-raises their errors.

        It returns once the batch has started (one pass of the loop): a caller building the next
        batch without ever waiting (a copy, an import) would otherwise hold every batch, and all
        its rows, until the commit."""
        batch = self._queued + self._appended
        self._queued, self._appended = [], []
        previous = self._in_flight

        async def send() -> None:
            if previous is not None:
                await previous
            await self._send(batch)

        self._in_flight = asyncio.ensure_future(send())
        await asyncio.sleep(0)

    async def settle(self) -> None:
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight

    async def flush(self) -> None:
        await self.settle()
        queued, self._queued = self._queued, []
        await self._send(queued)

    def take_all(self) -> Queued:
        """Everything still queued, appends last (for the commit, which sends it)."""
        queued = self._queued + self._appended
        self._queued, self._appended = [], []
        return queued

    async def _send(self, queued: Queued) -> None:
        if queued:
            await self._driver.send(queued)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once later transactions see this one's writes (cache upkeep)."""
        self.callbacks.append(callback)

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once this transaction is durable (publishing what it recorded)."""
        self.durable_callbacks.append(callback)


class WriterSlots:
    """The writer connections' slots (one on SQLite), with a priority lane: when one is released, a
    waiting ``urgent`` writer (an admission a client is waiting on) goes before the others (drain
    loops' writes), so accepting a prompt does not queue behind every running turn. First come,
    first served within each lane; a slot is handed over directly, so a waiter is never overtaken
    by a newcomer that did not wait."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (deque(), deque())

    async def acquire(self, *, urgent: bool = False) -> None:
        if self._free and not any(self._waiters):
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._waiters[0 if urgent else 1]
        lane.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed to us as we were cancelled: pass it on
            else:
                lane.remove(waiter)
            raise

    def release(self) -> None:
        for lane in self._waiters:
            while lane:
                waiter = lane.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # handed over: still taken
                    return
        self._free += 1


class UrgentFirst:
    """Urgent writes (a client waits for each: admissions, the part a streamed delta opens) are
    made durable before other writes (drain loops') begin: a non-urgent write first waits while
    urgent writes are in flight, up to ``HOLD_LIMIT_S``.

    Why, beyond the writer lock's priority lane: under load the event loop itself is the queue. An
    admission's commit and its caller's wake-up each wait their turn behind every drain step ready
    at that moment, and each step runs a transaction (statements, a commit, publishing) without
    suspending. Holding drain transactions back while admissions are in flight (a few milliseconds
    each) cut the accept p99 of ``bench/load.py``, relative to each run's CPU per prompt (the
    machine's speed varies), and the held-back transactions commit in larger groups. The limit
    keeps a flood of admissions from stalling the turns: each drain transaction waits at most that
    long."""

    HOLD_LIMIT_S = 0.1

    def __init__(self) -> None:
        self._in_flight = 0
        # The held-back writes, each waiting on a future of its own until the last urgent write
        # in flight ends (a wait on every write in flight put a callback on each of them, for
        # every held-back write, again each time one ended).
        self._held: list[asyncio.Future[None]] = []

    def begin(self) -> None:
        self._in_flight += 1

    def end(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            held, self._held = self._held, []
            for waiter in held:
                if not waiter.done():  # else it gave up and is leaving
                    waiter.set_result(None)

    async def yield_to_urgent(self) -> None:
        if not self._in_flight:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append(waiter)
        try:
            async with asyncio.timeout(self.HOLD_LIMIT_S):
                await waiter
        except TimeoutError:
            pass
        finally:
            # One that gave up (timed out, or its caller was cancelled) leaves the list at once:
            # under sustained load urgent writes may never all be done.
            if waiter.cancelled() and waiter in self._held:
                self._held.remove(waiter)


class Database(ABC):
    """What the server needs from a database; ``open_database`` picks the engine from the URL.

    ``shared`` says whether other server processes may write to the same database (PostgreSQL):
    then write transactions are serialized across processes too, sequence numbers are read from
    the database rather than cached, and live events travel through ``listen``/``notify``."""

    shared = False
    writers = 1  # write transactions open at once (each on a writer connection of its own)
    # The driver's statements complete without suspending (SQLite on the loop's thread): then a
    # commit cannot be interrupted half-way and needs no task of its own to finish in.
    writes_inline = False

    def __init__(self, url: str) -> None:
        self.url = url
        self._write_slots = WriterSlots(self.writers)
        self._urgent_first = UrgentFirst()
        self._lost_writes_listeners: list[Callable[[], None]] = []

    def on_lost_writes(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` if writes that later transactions already saw are lost after all (a
        group commit failed): what was cached from them must be forgotten."""
        self._lost_writes_listeners.append(callback)

    def _lost_writes(self) -> None:
        for callback in self._lost_writes_listeners:
            callback()

    def _durable(self, callbacks: list[Callable[[], None]], *, at_once: bool = False) -> asyncio.Future[None] | None:
        """Called under the lock right after a commit: run ``callbacks`` once it is durable. The
        commit is durable already here; an engine that defers it returns what to wait for, a
        future of this transaction's own (a cancelled caller cancels it, and nothing else), and
        does not defer an ``at_once`` transaction behind others."""
        for callback in callbacks:
            callback()
        return None

    @abstractmethod
    async def open(self) -> None:
        """Connect, and bring the schema to the newest migration."""

    @abstractmethod
    async def migrate(self) -> None: ...

    @abstractmethod
    async def check(self) -> None:
        """Raise DatabaseUnavailable, with a one-line reason, if ``open`` cannot succeed now (a
        quick probe before the server starts; ``open`` checks again)."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]: ...

    async def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call ``callback`` with the payload of every notification on ``channel`` (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no notifications")

    async def ensure_listening(self) -> None:
        """Re-establish notifications after the database was lost (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no notifications")

    async def notify(self, channel: str, *payloads: str) -> None:
        """Send notifications now, in order, outside any transaction (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no notifications")

    def present_as(self, origin: str) -> None:
        """Say, for as long as this process stays connected, that ``origin`` is (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no presence")

    @property
    def present_since(self) -> float | None:
        """Since when this process's presence has been held; None while it is not (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no presence")

    async def absent(self, origins: list[str]) -> set[str]:
        """Those of ``origins`` whose presence nobody holds now (shared engines)."""
        raise NotImplementedError(f"{type(self).__name__} has no presence")

    async def execute_alone(self, statement: Statement, params: Params) -> list[Row]:
        """Run one write statement in a transaction of its own, outside this process's writer
        queue where the engine allows (PostgreSQL: on a pooled connection, one round trip), and
        return its rows. For a write that must not wait behind every queued transaction, such as
        renewing leases under load (a renewal stuck in the queue lets them expire), or one that
        orders itself (a lease claim takes the session's hold inside its statement)."""
        async with self.write() as scope:
            return await scope.fetch(statement, params)

    async def fetch_one(self, statement: Statement, params: Params | None = None) -> Row | None:
        rows = await self.fetch(statement, params)
        return rows[0] if rows else None

    # -- the writer connections, as each engine provides them -------------------------------------

    @abstractmethod
    async def _begin(self) -> Writer:
        """A writer connection (one of ``writers``) with a transaction begun on it."""

    def _release(self, writer: Writer) -> None:
        """The transaction on ``writer`` has ended: the connection is free for the next one (an
        engine with one writer connection has nothing to do)."""
        return None

    @asynccontextmanager
    async def write(
        self, *, urgent: bool = False, at_once: bool = False, queue: AbstractAsyncContextManager[None] | None = None
    ) -> AsyncIterator[WriteScope]:
        """A write transaction; ``urgent`` ones (a client waits on them) go first (``UrgentFirst``).
        An ``at_once`` one is made durable as soon as it ends, where an engine would otherwise
        commit it together with the transactions that end after it (SQLite's group commit).
        ``queue`` is held from when the transaction may begin (a drain's has yielded to urgent
        ones) to its end, and entered before it takes a writer connection."""
        queued = queue if queue is not None else nullcontext()
        if not urgent:
            await self._urgent_first.yield_to_urgent()
            async with queued, self._transaction(urgent=False, at_once=at_once) as scope:
                yield scope
            return
        self._urgent_first.begin()
        try:
            async with queued, self._transaction(urgent=True, at_once=at_once) as scope:
                yield scope
        finally:
            self._urgent_first.end()

    @asynccontextmanager
    async def _transaction(self, *, urgent: bool, at_once: bool) -> AsyncIterator[WriteScope]:
        """One write transaction, returning once it is durable."""
        began = time.perf_counter()
        await self._write_slots.acquire(urgent=urgent)
        durable: asyncio.Future[None] | None = None
        try:
            writer = await self._begin()
            locked = time.perf_counter()
            scope = WriteScope(writer)
            try:
                try:
                    yield scope
                except BaseException:
                    with suppress(BaseException):
                        await scope.settle()  # no batch may still be running when we roll back
                    await writer.rollback()
                    raise
                if self.writes_inline:
                    await self._commit(writer, scope)
                else:
                    finishing = asyncio.ensure_future(self._commit(writer, scope))
                    try:
                        await asyncio.shield(finishing)
                    except asyncio.CancelledError:
                        # Let the commit (or its rollback) finish before anyone else uses the connection.
                        with suppress(BaseException):
                            await finishing
                        raise
            finally:
                self._release(writer)
            # Handed over, not kept: the callbacks close over the transaction that holds this
            # scope, and a scope still holding them would make a reference cycle of every
            # transaction, left for the garbage collector (docs/architecture.md, "Under load").
            callbacks, scope.callbacks = scope.callbacks, []
            for callback in callbacks:
                callback()
            durable_callbacks, scope.durable_callbacks = scope.durable_callbacks, []
            durable = self._durable(durable_callbacks, at_once=at_once)
        finally:
            self._write_slots.release()
        if durable is not None:
            await durable  # the transaction's own future: a cancelled wait leaves the commit be
        metrics.RECORDER.transaction(locked - began, time.perf_counter() - began)

    async def _commit(self, writer: Writer, scope: WriteScope) -> None:
        try:
            await scope.settle()
            await writer.commit(scope.take_all(), scope.transaction_id)
        except BaseException:
            await writer.rollback()
            raise


def open_database(url: str, *, writers: int | None = None, stalled_after_s: float | None = None) -> Database:
    """The engine for ``url``: ``sqlite:///path`` (or ``sqlite+aiosqlite``) or
    ``postgresql://`` (or ``postgresql+asyncpg``). PostgreSQL's driver is imported only when used;
    ``writers`` is how many write transactions it runs at once (SQLite: one, always), and
    ``stalled_after_s`` how long one may idle mid-transaction before PostgreSQL ends it."""
    if re.match(r"sqlite(\+aiosqlite)?:///", url):
        from app.store.sqlite import SqliteDatabase

        return SqliteDatabase(url)
    if re.match(r"postgres(ql)?(\+asyncpg)?://", url):
        from app.store import postgres

        return postgres.PostgresDatabase(
            url,
            writers=postgres.WRITERS if writers is None else writers,
            stalled_after_s=postgres.STALLED_AFTER_S if stalled_after_s is None else stalled_after_s,
        )
    raise UnsupportedDatabase(
        f"unsupported database URL {url!r}: use a SQLite file path or postgresql+asyncpg://user:pass@host:port/db"
    )


async def upgrade_schema(url: str) -> None:
    """Bring the schema at ``url`` (a SQLAlchemy async URL) to the newest revision with Alembic."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy.ext.asyncio import create_async_engine

    def upgrade(connection: Any) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
    finally:
        await engine.dispose()
