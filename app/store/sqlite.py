"""The SQLite engine (the embedded default) on the aiosqlite driver.

- SQLite allows one writer: every write transaction opens with ``BEGIN IMMEDIATE`` and
  ``busy_timeout`` covers a brief overlap; readers, in WAL mode, never wait.
- One server process per database file: the server holds an exclusive lock on ``<file>.lock``
  while it runs, and a second process on the same file is refused at start (its events, status
  and drains would be invisible to the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import aiosqlite

from app.store.database import (
    READERS,
    Database,
    DatabaseUnavailable,
    Params,
    Row,
    UnsupportedDatabase,
    _head_revision,
    upgrade_schema,
)

_BEGIN = "BEGIN IMMEDIATE"
_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    # NORMAL in WAL mode survives a process crash (kill -9); only power loss may drop the tail.
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=10000",
)


def sqlite_path(url: str) -> str:
    match = re.fullmatch(r"sqlite(?:\+aiosqlite)?:///(.*)", url)
    if not match:
        raise UnsupportedDatabase(f"not a SQLite URL: {url!r}")
    return match.group(1)


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
        return bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0)


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


def _lock(path: str) -> IO[bytes]:
    """Hold ``<path>.lock`` exclusively for the life of the process (released by the kernel when
    the process dies, so a kill -9 leaves no stale lock)."""
    handle = open(f"{path}.lock", "a+b")  # noqa: SIM115 - held open on purpose until close()
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().decode(errors="replace").strip() or "another process"
        handle.close()
        raise DatabaseUnavailable(
            f"{path} is in use by {holder}: SQLite serves one opensession process; "
            "run more processes on PostgreSQL (--db postgresql+asyncpg://...)"
        ) from None
    handle.truncate(0)
    handle.write(f"opensession pid {os.getpid()}".encode())
    handle.flush()
    return handle


_Statement = tuple[str, Any, bool]  # (sql, params or rows, executemany?)


def _run_batch(conn: sqlite3.Connection, batch: list[_Statement]) -> list[Row]:
    """Run statements in order on the writer's thread; the last one's rows are returned."""
    cursor: sqlite3.Cursor | None = None
    for sql, params, many in batch:
        cursor = conn.executemany(sql, params) if many else conn.execute(sql, params)
    return list(cursor.fetchall()) if cursor is not None else []


class _Writer:
    """The writer connection, on a thread of its own, with statements held back until a result
    or the end of the transaction is needed.

    Why not aiosqlite here (the readers use it): aiosqlite sends each statement to its thread
    and back, and under load those hand-offs, not SQLite, were most of a turn's cost (a turn made
    about 65 of them). Held back, a transaction (``BEGIN IMMEDIATE``, its statements, ``COMMIT``)
    is one hand-off, two when it reads in the middle. Errors surface at that hand-off, still inside
    the transaction, which the caller then rolls back. Only one transaction uses the connection
    at a time (``Database.write`` holds the writer lock), so the buffer needs no lock."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opensession-sqlite-writer")
        self._conn: sqlite3.Connection | None = None
        self._held: list[_Statement] = []
        self._begun = False  # BEGIN was handed to the thread (so a failure needs a ROLLBACK)

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def connect(self) -> None:
        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            for pragma in _PRAGMAS:
                conn.execute(pragma)
            return conn

        self._conn = await self._call(connect)

    async def run(self, sql: str, params: Params) -> None:
        self._held.append((sql, params, False))

    async def run_many(self, sql: str, rows: list[Params]) -> None:
        self._held.append((sql, rows, True))

    async def rows(self, sql: str, params: Params) -> list[Row]:
        return await self._send([(sql, params, False)])

    async def _send(self, tail: list[_Statement]) -> list[Row]:
        batch, self._held = [*self._held, *tail], []
        if any(sql == _BEGIN for sql, _params, _many in batch):
            self._begun = True
        result: list[Row] = await self._call(_run_batch, self._conn, batch)
        return result

    def begin(self) -> None:
        self._held = [(_BEGIN, {}, False)]
        self._begun = False

    async def commit(self) -> None:
        await self._send([("COMMIT", {}, False)])
        self._begun = False

    async def rollback(self) -> None:
        self._held = []
        if self._begun:  # else nothing of the transaction reached the database
            self._begun = False
            with contextlib.suppress(sqlite3.Error):
                await self._call(_run_batch, self._conn, [("ROLLBACK", {}, False)])

    async def close(self) -> None:
        if self._conn is not None:
            await self._call(self._conn.close)
            self._conn = None
        self._thread.shutdown(wait=True)


class SqliteDatabase(Database):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._lock_file: IO[bytes] | None = None
        self._writer_conn: _Writer | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all_readers: list[aiosqlite.Connection] = []

    async def _connect(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        for pragma in _PRAGMAS:
            await conn.execute(pragma)
        return conn

    async def open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock(self.path)
        current, head = _current_revision(self.path), _head_revision()
        if current is None and _is_empty(self.path):
            await asyncio.to_thread(_create_fresh, self.path, head)
        elif current != head:
            await self.migrate()
        self._writer_conn = _Writer(self.path)
        await self._writer_conn.connect()
        for _ in range(READERS):
            reader = await self._connect()
            self._all_readers.append(reader)
            self._readers.put_nowait(reader)

    async def check(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        _lock(self.path).close()

    async def migrate(self) -> None:
        await upgrade_schema(f"sqlite+aiosqlite:///{self.path}")

    def _writer(self) -> _Writer:
        assert self._writer_conn is not None, "database is not open"
        return self._writer_conn

    async def _begin(self) -> None:
        self._writer().begin()

    async def _end(self, commit: bool) -> None:
        if commit:
            await self._writer().commit()
        else:
            await self._writer().rollback()

    async def fetch(self, sql: str, params: Params | None = None) -> list[Row]:
        conn = await self._readers.get()
        try:
            return list(await conn.execute_fetchall(sql, params or {}))
        finally:
            self._readers.put_nowait(conn)

    async def close(self) -> None:
        if self._writer_conn is not None:
            await self._writer_conn.close()
            self._writer_conn = None
        for reader in self._all_readers:
            await reader.close()
        self._all_readers.clear()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
