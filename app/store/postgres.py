"""The PostgreSQL engine on the asyncpg driver, for more than one process or machine.

Statements come from ``app.store.sql``, compiled ahead for PostgreSQL too (``$n`` parameters,
filled from the same named parameters the SQLite engine takes). The schema is created and
upgraded by the same Alembic migrations as SQLite's.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any

import asyncpg

from app.store import pg_script, sql
from app.store.database import (
    Database,
    DatabaseUnavailable,
    Params,
    Queued,
    Row,
    Writer,
    _head_revision,
    send_in_groups,
    upgrade_schema,
)
from app.store.statement import Statement


def _with_scheme(url: str, scheme: str) -> str:
    return re.sub(r"^postgres(ql)?(\+asyncpg)?://", f"{scheme}://", url)


def _dsn(url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy-style URL (``postgresql+asyncpg://`` -> ``postgresql://``)."""
    return _with_scheme(url, "postgresql")


def _where(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


# What a lost database looks like to the driver: the connection broke, the server shut down or
# refuses connections now. Each becomes DatabaseUnavailable (a 503 for clients).
# InternalClientError ("cannot switch to state 12; another operation (2) is in progress") is a
# connection the server ended while it was idle, as a restart or pg_terminate_backend does:
# asyncpg has read the server's FATAL message, which it does not expect between statements, but
# not yet the connection's end, so it refuses the next statement (nothing runs). Seen once in 30
# terminations of an idle connection followed at once by a read, and at every PostgreSQL restart
# under load (bench/chaos.py).
LOST = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InvalidCatalogNameError,
)


@contextmanager
def _reachable(url: str, *, connecting: bool = False) -> Iterator[None]:
    """Turn a lost database into DatabaseUnavailable. While ``connecting`` any refusal counts
    (the server may be starting, or the database closed to connections)."""
    lost: tuple[type[BaseException], ...] = (*LOST, asyncpg.PostgresError) if connecting else LOST
    try:
        yield
    except lost as exc:
        raise DatabaseUnavailable(f"PostgreSQL at {_where(url)} is unavailable: {exc}") from exc


# A pooled connection the server ended while it sat idle, found out by the statement put on it:
# asyncpg read the end (ConnectionDoesNotExistError) or only its FATAL message (InternalClientError).
_ENDED_WHILE_IDLE = (asyncpg.exceptions.InternalClientError, asyncpg.exceptions.ConnectionDoesNotExistError)


def _positional(statement: Statement, params: Params) -> list[Any]:
    return [params[name] for name in statement.postgres_params]


class _Pooled:
    """Connections for statements outside the writers' transactions (reads, notifications,
    statements alone), one caller at a time on each, at most ``size`` of them, opened as needed
    and again after a loss. They only run statements in transactions of their own and never
    LISTEN, lock or SET, so one is handed on as it was left.

    Why not asyncpg's pool: its acquire and release cost the caller about 100 us of CPU per use,
    more than a read itself (63 us; measured on loopback, 5,000 ``SELECT 1``), and a turn makes a
    dozen such uses. A connection a caller left mid-statement (cancelled, or the link broke) is
    closed, not handed on; one whose statement the server refused is fine and kept, unless the
    refusal ends the connection (a server shutting down answers every statement with
    ``AdminShutdownError``, and a connection handed on after it failed its next caller with
    asyncpg's "another operation is in progress")."""

    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._slots = asyncio.Semaphore(size)
        self._idle: list[asyncpg.Connection] = []
        self._all: set[asyncpg.Connection] = set()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._slots:
            conn = await self._connected()
            try:
                yield conn
            except BaseException as exc:
                if isinstance(exc, asyncpg.PostgresError) and not isinstance(exc, LOST):
                    self._idle.append(conn)  # the server answered, and goes on: a known state
                else:  # cut off, or the server ends the connection (it is shutting down)
                    self._all.discard(conn)
                    conn.terminate()
                raise
            self._idle.append(conn)

    async def _connected(self) -> asyncpg.Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._all.discard(conn)
        with _reachable(self._url, connecting=True):
            conn = await asyncpg.connect(_dsn(self._url), timeout=5)
        self._all.add(conn)
        return conn

    async def close(self) -> None:
        """Close the idle connections, and cut those still in use (the server is stopping)."""
        idle, every = self._idle, self._all  # taken first: callers still running change the new ones
        self._idle, self._all = [], set()
        for conn in every:
            if conn in idle:
                await conn.close()
            else:
                conn.terminate()


# How long a commit whose answer was lost waits for the database to tell whether it happened.
OUTCOME_PATIENCE_S = 15.0


async def committed(url: str, transaction_id: int) -> bool:
    """Whether transaction ``transaction_id`` committed, asked on a new connection once the
    database answers again (a restart: once it is back). Raises DatabaseUnavailable if it does not
    answer within ``OUTCOME_PATIENCE_S``: then nobody can say whether the write was stored.

    Why ask rather than report the write failed: the client would be told 503 for a prompt that
    is stored and gets answered, and a retry would admit it twice."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTCOME_PATIENCE_S
    while True:
        status: str | None = "unreachable"
        with suppress(*LOST, asyncpg.PostgresError):
            conn = await asyncpg.connect(_dsn(url), timeout=2)
            try:
                status = await conn.fetchval("SELECT pg_xact_status($1::text::xid8)", str(transaction_id))
            finally:
                conn.terminate()
        if status not in ("unreachable", "in progress"):
            return bool(status == "committed")  # else aborted, or None: too old to be this one
        if loop.time() > deadline:
            raise DatabaseUnavailable(
                f"PostgreSQL at {_where(url)} was lost during a commit and has not answered since: "
                "whether the write was stored is unknown"
            )
        await asyncio.sleep(0.25)


def _deliver(callback: Callable[[str], None]) -> Callable[[Any, int, str, str], None]:
    return lambda _conn, _pid, _channel, payload: callback(payload)


class _Connection:
    """A writer connection. It sends a transaction in as few round trips as it can: BEGIN and
    holds wait for the next statement, queued writes go as one script (``pg_script``), and a
    commit begins the connection's next transaction in the same round trip ("COMMIT; BEGIN": an
    open transaction with no statement run yet holds no snapshot, transaction id or lock), so a
    transaction's first read is its first round trip.

    One the driver can no longer use (an operation cut short while the database went away still
    holds its protocol) is dropped, so the next transaction opens a new one instead of failing on
    it: the client is told 503, as for any lost database."""

    def __init__(self, conn: asyncpg.Connection, url: str) -> None:
        self.conn = conn
        self.url = url
        self._begun = False  # a transaction is open, or its BEGIN waits in ``_pending``
        self._pending: list[str] = []  # statements for the next round trip (BEGIN, holds)
        self._sent = False  # the open transaction ran a statement
        self._prepared = pg_script.Prepared()  # statements prepared on this connection
        self.last_sent = time.monotonic()  # when its last round trip began (``PostgresDatabase``)

    @contextmanager
    def _usable(self) -> Iterator[None]:
        self.last_sent = time.monotonic()
        with _reachable(self.url):
            try:
                yield
            except asyncpg.InternalClientError as exc:
                self.discard()
                raise DatabaseUnavailable(f"PostgreSQL connection dropped: {exc}") from exc

    def discard(self) -> None:
        self.conn.terminate()

    @property
    def waits_in_transaction(self) -> bool:
        """Whether the server has a transaction open on it (one a BEGIN waits to open is not)."""
        return self._begun and self._pending[:1] != ["BEGIN"]

    def renew(self) -> None:
        """End the empty transaction this idle writer waits in and begin another, with the next
        round trip: the server's clock of how long it idles in a transaction starts again."""
        if self._begun and not self._pending:
            self._pending = ["COMMIT", "BEGIN"]

    def begin(self) -> None:
        """Open a transaction, without a round trip of its own."""
        if not self._begun:
            self._pending.append("BEGIN")
            self._begun = True
        self._sent = False

    async def _script(self, statements: list[str]) -> None:
        """Run ``statements`` in one round trip (simple query protocol)."""
        with self._usable():
            await self.conn.execute(";\n".join(statements))

    async def _ahead(self) -> None:
        """Send what waits for the next round trip before a statement that cannot take it along."""
        self._sent = True
        if self._pending:
            pending, self._pending = self._pending, []
            await self._script(pending)

    async def run(self, statement: Statement, params: Params) -> None:
        await self._ahead()
        with self._usable():
            await self.conn.execute(statement.postgres, *_positional(statement, params))

    async def run_many(self, statement: Statement, rows: list[Params]) -> None:
        if not rows:
            return
        await self._ahead()
        with self._usable():
            await self.conn.executemany(statement.postgres, [_positional(statement, row) for row in rows])

    async def rows(self, statement: Statement, params: Params) -> list[Row]:
        await self._ahead()
        with self._usable():
            return list(await self.conn.fetch(statement.postgres, *_positional(statement, params)))

    async def send(self, queued: Queued) -> None:
        script = self._prepared.script(queued)
        if script is None:
            await send_in_groups(self, queued)
            return
        pending, self._pending = self._pending, []
        self._sent = True
        await self._run(pending, script)

    async def hold(self, key: str) -> None:
        self._pending.append(pg_script.statement_text(sql.HOLD, {"key": key}))

    async def commit(self, queued: Queued, transaction_id: int | None) -> None:
        script = self._prepared.script(queued)
        if script is None:
            await send_in_groups(self, queued)
            script = pg_script.Script([], [])
        if not script.texts and not self._sent:
            self._forget_pending()
            return  # nothing ran: the transaction stays open, empty, for the next one
        pending, self._pending = self._pending, []
        self._sent, self._begun = True, False  # a failure from here on is rolled back
        try:
            await self._run(pending, script, "COMMIT", "BEGIN")
        except DatabaseUnavailable:
            # The connection was lost with the script: perhaps after its COMMIT (a server
            # stopping ends each connection before its next statement, here the BEGIN).
            if transaction_id is None or not await committed(self.url, transaction_id):
                raise
            self.discard()
            return
        self._begun = True

    async def _run(self, pending: list[str], script: pg_script.Script, *after: str) -> None:
        """``script`` after ``pending`` and before ``after``, in one round trip; a failure
        forgets what the script was to prepare (``Prepared``)."""
        try:
            await self._script([*pending, *script.texts, *after])
        except BaseException:
            self._prepared.failed(script)
            raise

    def _forget_pending(self) -> None:
        """Drop the holds of a transaction that ran nothing; a BEGIN (or a renewal's COMMIT and
        BEGIN) not sent yet stays for the next."""
        self._pending = list(itertools.takewhile(lambda text: text in ("COMMIT", "BEGIN"), self._pending))

    async def rollback(self) -> None:
        if not self._sent:
            self._forget_pending()
            return  # nothing ran: nothing to roll back
        self._pending, self._begun = [], False
        try:
            await self._script(["ROLLBACK"])
        except (DatabaseUnavailable, asyncpg.PostgresError):
            self.discard()  # a transaction may still be open on it: never reuse it


# Write transactions on one connection each, this many at once per process by default
# (``OPENSESSION_DB_WRITERS``). Nothing serializes them cluster-wide: a session's events are
# ordered by its hold (``WriteScope.hold``, an advisory lock keyed by the session), and the
# whole-server cursor by transaction id (``app.events.log``).
WRITERS = 8
# Connections for reads and notifications: more than SQLite's reader threads, since each one waits
# a network round trip, not a disk read. Statements alone (lease claims, releases, renewals) have
# connections of their own: a claim waits there on its session's hold while a writer commits, and
# the writer may need a read to get there, so claims must never take every reader. With the
# default writers and the listener: at most 17 connections per process (as many as before these lists).
READERS = 6
ALONE = 2
# How long a writer may idle inside a transaction before PostgreSQL ends its connection (and
# with it the transaction's holds): by default the drain lease (``Settings.lease_seconds``).
STALLED_AFTER_S = 10.0
# The first key of the advisory locks that say a process is connected (``present_as``); the
# second is the hash of the process's origin.
PRESENCE_LOCKS = 0x6F736573
_PRESENT = "SELECT pg_advisory_lock_shared($1, hashtext($2))"
_ABSENT = """
SELECT origin FROM unnest($1::text[]) AS origin WHERE NOT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND classid = $2 AND objid = hashtext(origin)::oid AND objsubid = 2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
"""


class PostgresDatabase(Database):
    shared = True
    writers = WRITERS

    def __init__(self, url: str, *, writers: int = WRITERS, stalled_after_s: float = STALLED_AFTER_S) -> None:
        self.writers = writers
        super().__init__(url)
        self._stalled_after_s = stalled_after_s
        self._idle: list[_Connection] = []  # writer connections not in use (each in an empty transaction)
        self._busy: set[_Connection] = set()
        self._readers = _Pooled(url, READERS)
        self._alone = _Pooled(url, ALONE)
        self._listener: asyncpg.Connection | None = None
        self._channels: dict[str, Callable[[str], None]] = {}
        self._origin: str | None = None  # whose presence the listener holds (``present_as``)
        self._present_since = 0.0

    async def open(self) -> None:
        try:
            await self.migrate()
            self._idle.append(await self._new_writer())
        except DatabaseUnavailable:
            await self.close()
            raise

    async def check(self) -> None:
        with _reachable(self.url, connecting=True):
            conn = await asyncpg.connect(_dsn(self.url), timeout=10)
        await conn.close()

    async def migrate(self) -> None:
        """Bring the schema to the newest revision. At it already (every start but the first
        after an upgrade), one query says so: Alembic's imports cost half a second a start."""
        if await self._revision() != _head_revision():
            await upgrade_schema(_with_scheme(self.url, "postgresql+asyncpg"))

    async def _revision(self) -> str | None:
        """The schema's Alembic revision, None when it has none yet (a new database)."""
        with _reachable(self.url, connecting=True):
            conn = await asyncpg.connect(_dsn(self.url), timeout=10)
        try:
            with _reachable(self.url):
                revision = await conn.fetchval("SELECT version_num FROM alembic_version")
        except asyncpg.UndefinedTableError:
            return None
        finally:
            await conn.close()
        return str(revision) if revision is not None else None

    async def _connected_writer(self) -> _Connection:
        """An idle writer connection, a new one when none is (the slots bound how many), or one
        lost earlier opened again (the database may be back). The server ends one that sat in
        its empty transaction for the stall limit (``_new_writer``): one silent for half of it
        begins a new transaction with its next round trip (no round trip of its own), one
        silent for most of it is closed rather than raced."""
        now = time.monotonic()
        while self._idle:
            writer = self._idle.pop()
            silent = (now - writer.last_sent) if writer.waits_in_transaction else 0.0
            if writer.conn.is_closed() or silent > self._stalled_after_s * 0.8:
                writer.discard()
                continue
            if silent > self._stalled_after_s / 2:
                writer.renew()
            return writer
        return await self._new_writer()

    async def _new_writer(self) -> _Connection:
        """A writer connection that PostgreSQL ends once it idles in a transaction for the stall
        limit. A process frozen (stopped, swapped out) or cut off mid-transaction would otherwise
        keep its sessions' holds, and the process taking its sessions over would wait on them
        for as long as the freeze lasts; so its holds last no longer than its leases. An idle
        writer waits in an empty transaction too (``_Connection.commit``), hence the freshness
        rules above."""
        limit_ms = str(max(1, int(self._stalled_after_s * 1000)))
        settings = {"idle_in_transaction_session_timeout": limit_ms}
        with _reachable(self.url, connecting=True):
            conn = await asyncpg.connect(_dsn(self.url), timeout=5, server_settings=settings)
        return _Connection(conn, self.url)

    async def _begin(self) -> _Connection:
        writer = await self._connected_writer()
        self._busy.add(writer)
        writer.begin()
        return writer

    def _release(self, writer: Writer) -> None:
        assert isinstance(writer, _Connection)
        self._busy.discard(writer)
        if not writer.conn.is_closed():
            self._idle.append(writer)

    async def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        self._channels[channel] = callback
        if self._listener is not None and not self._listener.is_closed():
            with _reachable(self.url):
                await self._listener.add_listener(channel, _deliver(callback))
        else:
            await self.ensure_listening()  # connects and listens on every channel so far

    async def ensure_listening(self) -> None:
        if self._listener is not None and not self._listener.is_closed():
            return
        with _reachable(self.url, connecting=True):
            name = " ".join(filter(None, ("opensession listener", self._origin)))  # pg_stat_activity shows it
            listener = await asyncpg.connect(_dsn(self.url), timeout=5, server_settings={"application_name": name})
            try:
                if self._origin is not None:
                    await listener.execute(_PRESENT, PRESENCE_LOCKS, self._origin)
                for channel, callback in self._channels.items():
                    await listener.add_listener(channel, _deliver(callback))
            except BaseException:
                listener.terminate()
                raise
            self._listener, self._present_since = listener, time.monotonic()

    def present_as(self, origin: str) -> None:
        """From its next connection on, the listener holds a lock that says ``origin`` is
        connected: PostgreSQL drops it the moment the connection ends (the process died, or its
        machine's connection did), so the others learn that at once (``absent``) instead of at
        its leases' expiry. Shared, so two origins that hash alike never wait for each other
        (one would only hide the other's absence)."""
        self._origin = origin

    @property
    def present_since(self) -> float | None:
        """When (``time.monotonic``) the listener last connected, holding this process's
        presence; None while it is lost."""
        return None if self._listener is None or self._listener.is_closed() else self._present_since

    async def absent(self, origins: list[str]) -> set[str]:
        """Those of ``origins`` whose presence no connection to this database holds."""
        with _reachable(self.url, connecting=True):
            async with self._readers.connection() as conn:
                return {row[0] for row in await conn.fetch(_ABSENT, origins, PRESENCE_LOCKS)}

    async def notify(self, channel: str, *payloads: str) -> None:
        with _reachable(self.url, connecting=True):
            async with self._readers.connection() as conn:  # one round trip; delivered in array order
                await conn.execute("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", channel, list(payloads))

    async def execute_alone(self, statement: Statement, params: Params) -> list[Row]:
        with _reachable(self.url, connecting=True):
            async with self._alone.connection() as conn:
                return list(await conn.fetch(statement.postgres, *_positional(statement, params)))

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        """A read, on a connection of the readers'. One the server ended while it was idle
        (``_ENDED_WHILE_IDLE``) is closed and the read made again on another: one ended alone (by
        an administrator, or a timeout) costs no client a 503. When that one fails too the
        database is going away: 503."""
        args = _positional(statement, params or {})
        try:
            return await self._read(statement, args)
        except DatabaseUnavailable as exc:
            if not isinstance(exc.__cause__, _ENDED_WHILE_IDLE):
                raise
            return await self._read(statement, args)

    async def _read(self, statement: Statement, args: list[Any]) -> list[Row]:
        async with self._readers.connection() as conn:
            with _reachable(self.url):
                return list(await conn.fetch(statement.postgres, *args))

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        for writer in [*self._idle, *self._busy]:
            await writer.conn.close()
        self._idle, self._busy = [], set()
        await self._readers.close()
        await self._alone.close()
