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
import logging
import os
import re
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import aiosqlite

from app.store.database import (
    READERS,
    Database,
    DatabaseUnavailable,
    Params,
    Queued,
    Row,
    UnsupportedDatabase,
    _head_revision,
    send_in_groups,
    upgrade_schema,
)
from app.store.statement import Statement

log = logging.getLogger(__name__)

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
    """A new database gets the current schema in one transaction and is stamped with the head
    revision, as Alembic recommends, instead of replaying every migration (and importing Alembic
    and SQLAlchemy) at first start. The DDL is what ``metadata.create_all`` issues, generated into
    app/store/sql.py; a test checks that this schema equals the one the migrations build."""
    from app.store.sql import SCHEMA

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement in SCHEMA:
            conn.execute(statement)
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))
        conn.execute("COMMIT")
    finally:
        conn.close()  # an exception before COMMIT leaves nothing: closing rolls back


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


def _open(path: str) -> sqlite3.Connection:
    """A connection for the loop's own thread (or, for checkpoints, one thread of its own)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


WRITER_CACHE_KIB = 32 * 1024
CHECKPOINT_EVERY = 100  # group commits between checkpoints (SQLite checkpoints about every 1,000 pages)


class _Group:
    """The write transactions of one event-loop iteration, committed to SQLite as one.

    Each transaction waits on a future of its own (``waiters``), resolved by the commit: a caller
    cancelled while it waits cancels only its own future, and nothing stands between the commit
    and its caller's wake-up (a shield around one shared future took a loop pass more)."""

    __slots__ = ("callbacks", "waiters")

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.waiters: list[asyncio.Future[None]] = []

    def settle(self, error: Exception | None = None) -> None:
        for waiter in self.waiters:
            if waiter.done():  # its caller was cancelled
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


class _Writer:
    """The writer connection, driven on the event loop's own thread, with group commit.

    Why not a thread (the readers use aiosqlite's): the writer lock is held for a whole
    transaction, so a hand-off to another thread and back inside it (waiting for the GIL, then for
    the loop to come round) held every other writer up; under load, prompts being admitted queued
    behind each other for tens of milliseconds while SQLite itself needed microseconds. In WAL mode
    with ``synchronous=NORMAL`` a commit appends to the WAL without fsync, so running it inline is
    cheaper than any hand-off, and a transaction no longer yields between its check and its write.

    Group commit: most of a small transaction's cost is its COMMIT, which writes every page it
    touched to the WAL. So each transaction is a SAVEPOINT inside
    one SQLite transaction. The first one to end in a loop iteration commits at once (an idle
    server adds no latency); those that end later in the same iteration, which only happens under
    load, stay open until the iteration ends, when one COMMIT makes all of them durable (unless
    one is ``at_once``: a stream's first delta waits on it, so it commits the group then). Their
    ``when_durable`` callbacks (publishing) run at the commit, in order, and only then are their
    callers resumed (a prompt is acknowledged once durable, as before).
    A transaction that fails rolls back to its savepoint and takes nothing else with it; a COMMIT
    that fails fails every transaction of the group (and ``on_lost_writes`` listeners drop what
    they cached from them).

    Checkpoints: the automatic one (copying the WAL back into the database file, with an fsync) is
    off on this connection; every ``CHECKPOINT_EVERY`` commits a thread with a connection of its
    own runs a ``PASSIVE`` one, which never blocks the writer. SQLite starts the WAL over only once
    every frame in it is copied back, and under steady writes the thread never catches up with the
    frames committed meanwhile, so the writer copies that short tail itself when the thread is
    done: the WAL stays bounded."""

    def __init__(self, path: str, lost_writes: Callable[[], None]) -> None:
        self._path = path
        self._lost_writes = lost_writes
        self._conn: sqlite3.Connection | None = None
        self._group: _Group | None = None
        self._in_savepoint = False
        self._commit_due = False  # the iteration ended while a transaction was still open
        self._committed_in_iteration = False  # then later transactions wait for its end
        self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opensession-sqlite-checkpoint")
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._commits = 0

    async def connect(self) -> None:
        self._conn = _open(self._path)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        # The writer keeps WRITER_CACHE_KIB of pages instead of SQLite's 2 MiB: on a database of a
        # few hundred MB the default kept re-reading index pages from the OS, which made a long
        # copy (a fork) much slower (bench/history.py). The cache only grows as pages are used.
        self._conn.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")

    def _connection(self) -> sqlite3.Connection:
        assert self._conn is not None, "database is not open"
        return self._conn

    async def run(self, statement: Statement, params: Params) -> None:
        self._connection().execute(statement.sqlite, params)

    async def run_many(self, statement: Statement, rows: list[Params]) -> None:
        self._connection().executemany(statement.sqlite, rows)

    async def rows(self, statement: Statement, params: Params) -> list[Row]:
        return list(self._connection().execute(statement.sqlite, params).fetchall())

    async def send(self, queued: Queued) -> None:
        await send_in_groups(self, queued)

    async def commit(self, queued: Queued, transaction_id: int | None = None) -> None:
        # In this process, so its outcome is never lost with a connection: no id to look up.
        await send_in_groups(self, queued)
        self._connection().execute("RELEASE tx")
        self._in_savepoint = False

    def begin(self) -> None:
        conn = self._connection()
        if self._group is None:
            conn.execute(_BEGIN)
            self._group = _Group()
            asyncio.get_running_loop().call_soon(self._commit_group)
        conn.execute("SAVEPOINT tx")
        self._in_savepoint = True

    async def hold(self, key: str) -> None:
        return None  # one write transaction at a time already

    async def rollback(self) -> None:
        if self._in_savepoint:
            self._in_savepoint = False
            with contextlib.suppress(sqlite3.Error):
                self._connection().execute("ROLLBACK TO tx")
                self._connection().execute("RELEASE tx")
            if self._commit_due:  # the transactions of the group before this one still commit
                self._commit_group()

    def durable(self, callbacks: list[Callable[[], None]], *, at_once: bool = False) -> asyncio.Future[None]:
        """What the transaction just released waits on: its group's COMMIT, at once for the first
        transaction of an iteration and for an ``at_once`` one."""
        assert self._group is not None, "no transaction"
        group = self._group
        group.callbacks.extend(callbacks)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        group.waiters.append(waiter)
        if at_once or self._commit_due or not self._committed_in_iteration:
            self._commit_group()
        return waiter

    def _commit_group(self) -> None:
        group = self._group
        if group is None:
            return
        if self._in_savepoint:  # a transaction is still open: commit as soon as it ends
            self._commit_due = True
            return
        self._group, self._commit_due = None, False
        try:
            self._connection().execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._connection().execute("ROLLBACK")
            self._lost_writes()
            group.settle(exc)
            return
        for callback in group.callbacks:
            try:
                callback()
            except Exception:  # one broken subscriber must not keep the others from their events
                log.exception("a callback after commit failed")
        group.settle()
        if not self._committed_in_iteration:
            self._committed_in_iteration = True
            asyncio.get_running_loop().call_soon(self._next_iteration)
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and self._checkpointing is None:
            self._commits = 0
            loop = asyncio.get_running_loop()
            self._checkpointing = loop.run_in_executor(self._checkpointer, self._checkpoint)
            self._checkpointing.add_done_callback(self._checkpointed)

    def _next_iteration(self) -> None:
        self._committed_in_iteration = False

    def _checkpoint(self) -> None:
        if self._checkpoint_conn is None:
            self._checkpoint_conn = _open(self._path)
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not done.cancelled() and done.exception() is not None:
            log.warning("WAL checkpoint failed: %s", done.exception())
        elif self._conn is not None and not self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the next round tries again
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    async def close(self) -> None:
        self._commit_group()
        if self._checkpointing is not None:
            with contextlib.suppress(Exception):
                await self._checkpointing
        self._checkpointer.shutdown(wait=True)
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None
        if self._conn is not None:
            self._conn.close()  # the last connection to close checkpoints the whole WAL
            self._conn = None


class SqliteDatabase(Database):
    writes_inline = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = sqlite_path(url)
        self._lock_file: IO[bytes] | None = None
        self._writer_conn: _Writer | None = None
        self._quick_reader: sqlite3.Connection | None = None
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
        self._writer_conn = _Writer(self.path, self._lost_writes)
        await self._writer_conn.connect()
        self._quick_reader = _open(self.path)
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

    async def _begin(self) -> _Writer:
        writer = self._writer()
        writer.begin()
        return writer

    def _durable(self, callbacks: list[Callable[[], None]], *, at_once: bool = False) -> asyncio.Future[None]:
        return self._writer().durable(callbacks, at_once=at_once)

    async def fetch(self, statement: Statement, params: Params | None = None) -> list[Row]:
        """A quick read (``Statement.quick``: a keyed lookup, or a turn's window) runs inline on the
        loop's thread, any other on a reader thread.

        Why inline: a reader thread costs more than a quick read itself. Each hand-off wakes the
        loop from another thread, and each SQLite call releases the GIL, so under load the loop
        thread kept waiting for a reader thread to give the GIL back in the middle of its own
        statements: ``bench/load.py``, runs alternating with the threaded version, measured less
        server CPU per prompt inline. The price: with no hand-offs a saturated loop runs longer
        passes, and a delta's fan-out waits for each (bench/README.md, "Load figures"). Listings,
        replays and scans stay on reader threads, where a large result does not hold up every
        session's stream while SQLite reads it."""
        if statement.quick:
            assert self._quick_reader is not None, "database is not open"
            return self._quick_reader.execute(statement.sqlite, params or {}).fetchall()
        conn = await self._readers.get()
        try:
            return list(await conn.execute_fetchall(statement.sqlite, params or {}))
        finally:
            self._readers.put_nowait(conn)

    async def close(self) -> None:
        if self._writer_conn is not None:
            await self._writer_conn.close()
            self._writer_conn = None
        if self._quick_reader is not None:
            self._quick_reader.close()
            self._quick_reader = None
        for reader in self._all_readers:
            await reader.close()
        self._all_readers.clear()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
