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
from pathlib import Path
from typing import IO

import aiosqlite

from app.store.database import (
    READERS,
    Database,
    DatabaseUnavailable,
    Driver,
    Params,
    Row,
    UnsupportedDatabase,
    _head_revision,
    upgrade_schema,
)

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


class _Connection:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def run(self, sql: str, params: Params) -> None:
        await self.conn.execute(sql, params)

    async def run_many(self, sql: str, rows: list[Params]) -> None:
        await self.conn.executemany(sql, rows)

    async def rows(self, sql: str, params: Params) -> list[Row]:
        return list(await self.conn.execute_fetchall(sql, params))


class SqliteDatabase(Database):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._lock_file: IO[bytes] | None = None
        self._writer_conn: _Connection | None = None
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
        self._writer_conn = _Connection(await self._connect())
        for _ in range(READERS):
            reader = await self._connect()
            self._all_readers.append(reader)
            self._readers.put_nowait(reader)

    async def check(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        _lock(self.path).close()

    async def migrate(self) -> None:
        await upgrade_schema(f"sqlite+aiosqlite:///{self.path}")

    def _writer(self) -> Driver:
        assert self._writer_conn is not None, "database is not open"
        return self._writer_conn

    async def _begin(self) -> None:
        await self._writer().run("BEGIN IMMEDIATE", {})

    async def _end(self, commit: bool) -> None:
        if commit:
            await self._writer().run("COMMIT", {})
            return
        with contextlib.suppress(sqlite3.Error):
            await self._writer().run("ROLLBACK", {})

    async def fetch(self, sql: str, params: Params | None = None) -> list[Row]:
        conn = await self._readers.get()
        try:
            return list(await conn.execute_fetchall(sql, params or {}))
        finally:
            self._readers.put_nowait(conn)

    async def close(self) -> None:
        if self._writer_conn is not None:
            await self._writer_conn.conn.close()
            self._writer_conn = None
        for reader in self._all_readers:
            await reader.close()
        self._all_readers.clear()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
