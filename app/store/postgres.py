"""The PostgreSQL engine on the asyncpg driver, for more than one process or machine.

Statements come from ``app.store.sql``, compiled ahead for PostgreSQL too (``$n`` parameters,
filled from the same named parameters the SQLite engine takes). The schema is created and
upgraded by the same Alembic migrations as SQLite's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg

from app.store import sql
from app.store.database import READERS, Database, DatabaseUnavailable, Params, Row, Writer, upgrade_schema
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
LOST = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
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


def _positional(statement: Statement, params: Params) -> list[Any]:
    return [params[name] for name in statement.postgres_params]


async def _as_left(_conn: asyncpg.Connection) -> None:
    """The pool's reset on release, which does nothing: the pooled connections only run
    statements in transactions of their own (reads, NOTIFY, ``execute_alone``) and never LISTEN,
    lock or SET, so asyncpg's default reset (four statements) was a round trip to the database
    after every read for nothing."""


def _deliver(callback: Callable[[str], None]) -> Callable[[Any, int, str, str], None]:
    return lambda _conn, _pid, _channel, payload: callback(payload)


class _Connection:
    """The writer connection. One the driver can no longer use (an operation cut short while
    the database went away still holds its protocol) is dropped, so the next transaction opens
    a new one instead of failing on it: the client is told 503, as for any lost database."""

    def __init__(self, conn: asyncpg.Connection, url: str) -> None:
        self.conn = conn
        self.url = url

    @contextmanager
    def _usable(self) -> Iterator[None]:
        with _reachable(self.url):
            try:
                yield
            except asyncpg.InternalClientError as exc:
                self.discard()
                raise DatabaseUnavailable(f"PostgreSQL connection dropped: {exc}") from exc

    def discard(self) -> None:
        self.conn.terminate()

    async def control(self, text: str) -> None:
        """A statement of the engine's own that takes no parameters (BEGIN, COMMIT, the lock)."""
        with self._usable():
            await self.conn.execute(text)

    async def run(self, statement: Statement, params: Params) -> None:
        with self._usable():
            await self.conn.execute(statement.postgres, *_positional(statement, params))

    async def run_many(self, statement: Statement, rows: list[Params]) -> None:
        if not rows:
            return
        with self._usable():
            await self.conn.executemany(statement.postgres, [_positional(statement, row) for row in rows])

    async def rows(self, statement: Statement, params: Params) -> list[Row]:
        with self._usable():
            return list(await self.conn.fetch(statement.postgres, *_positional(statement, params)))

    async def hold(self, key: str) -> None:
        await self.run(sql.HOLD, {"key": key})

    async def end(self, commit: bool) -> None:
        if commit:
            await self.control("COMMIT")
            return
        try:
            await self.control("ROLLBACK")
        except (DatabaseUnavailable, asyncpg.PostgresError):
            self.discard()  # a transaction may still be open on it: never reuse it


# Write transactions on one connection each, this many at once per process. Nothing serializes
# them cluster-wide: a session's events are ordered by its hold (``WriteScope.hold``, an advisory
# lock keyed by the session), and the whole-server cursor by transaction id (``app.events.log``).
WRITERS = 8


class PostgresDatabase(Database):
    shared = True
    writers = WRITERS

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._idle: list[_Connection] = []  # writer connections with no transaction open
        self._busy: set[_Connection] = set()
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._channels: dict[str, Callable[[str], None]] = {}

    async def open(self) -> None:
        dsn = _dsn(self.url)
        try:
            await self.migrate()
            with _reachable(self.url, connecting=True):
                self._idle.append(_Connection(await asyncpg.connect(dsn), self.url))
                self._pool = await asyncpg.create_pool(dsn, min_size=1, max_size=READERS, reset=_as_left)
        except DatabaseUnavailable:
            await self.close()
            raise

    async def check(self) -> None:
        with _reachable(self.url, connecting=True):
            conn = await asyncpg.connect(_dsn(self.url), timeout=10)
        await conn.close()

    async def migrate(self) -> None:
        await upgrade_schema(_with_scheme(self.url, "postgresql+asyncpg"))

    async def _connected_writer(self) -> _Connection:
        """An idle writer connection, a new one when none is (the slots bound how many), or one
        lost earlier opened again (the database may be back)."""
        while self._idle:
            writer = self._idle.pop()
            if not writer.conn.is_closed():
                return writer
        with _reachable(self.url, connecting=True):
            return _Connection(await asyncpg.connect(_dsn(self.url), timeout=5), self.url)

    async def _begin(self) -> _Connection:
        writer = await self._connected_writer()
        self._busy.add(writer)
        try:
            await writer.control("BEGIN")
        except BaseException:  # cancelled or lost: leave no transaction open on it
            await writer.end(commit=False)
            self._release(writer)
            raise
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
            self._listener = await asyncpg.connect(_dsn(self.url), timeout=5)
            for channel, callback in self._channels.items():
                await self._listener.add_listener(channel, _deliver(callback))

    async def notify(self, channel: str, *payloads: str) -> None:
        assert self._pool is not None, "database is not open"
        with _reachable(self.url, connecting=True):
            async with self._pool.acquire() as conn:  # one round trip; delivered in array order
                await conn.execute("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", channel, list(payloads))

    async def execute_alone(self, statement: Statement, params: Params) -> None:
        assert self._pool is not None, "database is not open"
        with _reachable(self.url, connecting=True):
            async with self._pool.acquire() as conn:
                await conn.execute(statement.postgres, *_positional(statement, params))

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        assert self._pool is not None, "database is not open"
        args = _positional(statement, params or {})
        with _reachable(self.url, connecting=True):
            conn = await self._pool.acquire()
        try:
            with _reachable(self.url):
                return list(await conn.fetch(statement.postgres, *args))
        finally:
            await self._pool.release(conn)

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        for writer in [*self._idle, *self._busy]:
            await writer.conn.close()
        self._idle, self._busy = [], set()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
