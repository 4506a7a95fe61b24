"""The database: schema migrations through SQLAlchemy/Alembic, and a thin async access path on
the aiosqlite driver for everything the server does while running.

Why not SQLAlchemy's async engine on the hot path: through its aiosqlite adapter every statement
costs three or four hand-offs to the driver's thread (cursor, execute, fetch, close), about
0.1 ms each here, which alone exceeded the latency targets (see bench/). Statements are still
built with SQLAlchemy Core (``app.store.sql``) and compiled once; here each one is a single
hand-off, and a write transaction's statements are batched with ``executemany``.

Invariants:
- SQLite allows one writer, so this process has exactly one writer connection, guarded by an
  asyncio lock, and every write transaction opens with ``BEGIN IMMEDIATE``; ``busy_timeout``
  covers other processes. Readers use their own connections and, in WAL mode, never wait.
- Callbacks registered with ``WriteScope.after_commit`` run after the commit succeeded and before
  the lock is released, so live fan-out happens in exactly the order transactions committed.
- A cancelled caller never leaves a half-finished commit on the shared writer connection.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import aiosqlite

import migrations
from app.store.sql import COMMUTING

MIGRATIONS_DIR = Path(migrations.__file__).parent
READERS = 3
_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    # NORMAL in WAL mode survives a process crash (kill -9); only power loss may drop the tail.
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=10000",
)

Params = dict[str, Any]
Row = Sequence[Any]


class UnsupportedDatabase(ValueError):
    """The URL names a database this version cannot serve from."""


def sqlite_path(url: str) -> str:
    match = re.fullmatch(r"sqlite(?:\+aiosqlite)?:///(.*)", url)
    if not match:
        raise UnsupportedDatabase(f"unsupported database URL {url!r}: only SQLite (a file path) is served for now")
    return match.group(1)


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


def _current_revision(path: str) -> str | None:
    if not Path(path).exists():
        return None
    with sqlite3.connect(path) as conn:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError:
            return None
    return row[0] if row else None


def _is_empty(path: str) -> bool:
    if not Path(path).exists():
        return True
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0


def _create_fresh(path: str, head: str) -> None:
    """A new database gets the current schema in one step and is stamped with the head revision,
    as Alembic recommends, instead of replaying every migration (and importing Alembic) at first
    start. A test checks that this schema equals the one the migrations build."""
    from sqlalchemy import create_engine, text

    from app.store.schema import metadata

    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:head)"), {"head": head})
    finally:
        engine.dispose()


def _commuting_segments(queued: list[tuple[str, Params]]) -> list[list[tuple[str, Params]]]:
    """Split the queue into runs of commuting and of other statements, and regroup each commuting
    run by statement: a fork's thousands of alternating message/part upserts become two
    executemany calls instead of thousands of round trips. Other runs keep their order."""
    segments: list[list[tuple[str, Params]]] = []
    commuting: dict[str, list[tuple[str, Params]]] = {}
    ordered: list[tuple[str, Params]] = []
    for item in queued:
        if item[0] in COMMUTING:
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


class WriteScope:
    """An open write transaction. Statements are queued and sent in batches (consecutive uses of
    one statement become one ``executemany``); reads through ``fetch`` see queued writes."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._queued: list[tuple[str, Params]] = []
        self._appended: list[tuple[str, Params]] = []
        self._in_flight: asyncio.Future[None] | None = None
        self.callbacks: list[Callable[[], None]] = []

    def execute(self, sql: str, params: Params) -> None:
        self._queued.append((sql, params))

    def append(self, sql: str, params: Params) -> None:
        """Queue an insert into an append-only table (the event log). Appends never conflict with
        the other statements of the transaction, so they are sent last, as one batch."""
        self._appended.append((sql, params))

    async def fetch(self, sql: str, params: Params | None = None) -> list[Row]:
        await self.flush()
        return list(await self._conn.execute_fetchall(sql, params or {}))

    def send_ahead(self) -> None:
        """Start sending everything queued so far while the caller prepares more (a large copy):
        the driver's thread writes one batch while Python builds the next. Batches stay in order;
        the next flush (or the commit) waits for them and re-raises their errors."""
        batch = self._queued + self._appended
        self._queued, self._appended = [], []
        previous = self._in_flight

        async def send() -> None:
            if previous is not None:
                await previous
            await self._send(batch)

        self._in_flight = asyncio.ensure_future(send())

    async def settle(self) -> None:
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight

    async def flush(self) -> None:
        await self.settle()
        queued, self._queued = self._queued, []
        await self._send(queued)

    async def flush_all(self) -> None:
        await self.flush()
        appended, self._appended = self._appended, []
        await self._send(appended)

    async def _send(self, queued: list[tuple[str, Params]]) -> None:
        for segment in _commuting_segments(queued):
            await self._send_in_order(segment)

    async def _send_in_order(self, queued: list[tuple[str, Params]]) -> None:
        start = 0
        while start < len(queued):
            sql = queued[start][0]
            end = start + 1
            while end < len(queued) and queued[end][0] == sql:
                end += 1
            if end - start == 1:
                await self._conn.execute(sql, queued[start][1])
            else:
                await self._conn.executemany(sql, [params for _, params in queued[start:end]])
            start = end

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.path = sqlite_path(url)
        self._writer: aiosqlite.Connection | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all_readers: list[aiosqlite.Connection] = []
        self._write_lock = asyncio.Lock()

    async def _connect(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        for pragma in _PRAGMAS:
            await conn.execute(pragma)
        return conn

    async def open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        current, head = _current_revision(self.path), _head_revision()
        if current is None and _is_empty(self.path):
            await asyncio.to_thread(_create_fresh, self.path, head)
        elif current != head:
            await self.migrate()
        self._writer = await self._connect()
        for _ in range(READERS):
            reader = await self._connect()
            self._all_readers.append(reader)
            self._readers.put_nowait(reader)

    async def migrate(self) -> None:
        """Bring the schema to the newest revision with Alembic (on SQLAlchemy's async engine)."""
        from alembic import command
        from alembic.config import Config
        from sqlalchemy.ext.asyncio import create_async_engine

        def upgrade(connection: Any) -> None:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")

        engine = create_async_engine(f"sqlite+aiosqlite:///{self.path}")
        try:
            async with engine.begin() as conn:
                await conn.run_sync(upgrade)
        finally:
            await engine.dispose()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[WriteScope]:
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            conn = self._writer
            await conn.execute("BEGIN IMMEDIATE")
            scope = WriteScope(conn)
            try:
                yield scope
            except BaseException:
                with suppress(BaseException):
                    await scope.settle()  # no batch may still be running when we roll back
                with suppress(sqlite3.Error):
                    await conn.execute("ROLLBACK")
                raise
            finishing = asyncio.ensure_future(self._commit(conn, scope))
            try:
                await asyncio.shield(finishing)
            except asyncio.CancelledError:
                # Let the commit (or its rollback) finish before anyone else uses the connection.
                with suppress(BaseException):
                    await finishing
                raise
            for callback in scope.callbacks:
                callback()

    @staticmethod
    async def _commit(conn: aiosqlite.Connection, scope: WriteScope) -> None:
        try:
            await scope.flush_all()
            await conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            raise

    async def fetch(self, sql: str, params: Params | None = None) -> list[Row]:
        conn = await self._readers.get()
        try:
            return list(await conn.execute_fetchall(sql, params or {}))
        finally:
            self._readers.put_nowait(conn)

    async def fetch_one(self, sql: str, params: Params | None = None) -> Row | None:
        rows = await self.fetch(sql, params)
        return rows[0] if rows else None

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        for reader in self._all_readers:
            await reader.close()
        self._all_readers.clear()
