"""Engines, connection set-up and the one write path.

SQLite (the embedded default) allows one writer at a time, so all writes of this process go
through a single connection guarded by an asyncio lock and open with ``BEGIN IMMEDIATE``: a
transaction never fails half-way with SQLITE_BUSY because of another task of ours, and
``busy_timeout`` covers other processes (the CLI). Reads use a separate pool and, with WAL, never
wait for the writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).parent


def _sqlite_engine(url: str, *, immediate: bool, pool_size: int) -> AsyncEngine:
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0 if immediate else 8)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash (kill -9); only power loss may drop the tail.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class WriteScope:
    """An open write transaction plus the work to do once it has committed."""

    conn: AsyncConnection

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class Database:
    """Owns the engines. ``write()`` is the only way to change rows."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self._writer = _sqlite_engine(url, immediate=True, pool_size=1)
            self._reader = _sqlite_engine(url, immediate=False, pool_size=4)
        else:
            self._writer = create_async_engine(url, pool_size=5, max_overflow=5)
            self._reader = self._writer
        self._write_lock = asyncio.Lock()

    async def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent; runs at every start)."""
        from alembic import command
        from alembic.config import Config

        def upgrade(connection) -> None:  # type: ignore[no-untyped-def]
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")

        async with self._writer.begin() as conn:
            await conn.run_sync(upgrade)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[WriteScope]:
        """One write transaction at a time. Callbacks registered with ``after_commit`` run once
        the commit succeeded and before the lock is released, so live fan-out happens in
        exactly the order transactions committed."""
        async with self._write_lock:
            scope = WriteScope()
            async with self._writer.begin() as conn:
                scope.conn = conn
                yield scope
            for callback in scope.callbacks:
                callback()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self._reader.connect() as conn:
            yield conn

    async def close(self) -> None:
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()
