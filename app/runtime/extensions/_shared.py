"""Run-time changes to the MCP servers (``POST /mcp``, a server's connect and disconnect) as one
process or a cluster keeps them.

One process keeps them in its connections alone, as OpenCode does: a restart forgets them. On a
database several processes share every process must offer the same servers (a turn may be drained
by any, a status read may land on any), so a change is recorded in the database
(``app.store.mcp_changes``) before it is made, and every process applies the others': it hears of
one by a notification once it has committed, or within seconds anyway (``app.store.following``).
A directory a process has not used yet gets the changes when it is first used.

Unlike one process, a cluster keeps them across restarts, until they are changed again: a process
that starts cannot tell a restart of the whole cluster from one where the others' connections to
the database are being made again (after a restart of PostgreSQL), and clearing them in the
second case would leave the processes offering different servers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.store import mcp_changes
from app.store.database import Database
from app.store.following import Following
from app.store.mcp_changes import McpChange

CHANNEL = "opensession_mcp"

Apply = Callable[[McpChange], Awaitable[None]]


class RunTimeChanges(Protocol):
    async def start(self, apply: Apply) -> None:
        """Begin following other processes' changes: ``apply`` gets each one newer than what
        this process knows."""
        ...

    async def stop(self) -> None: ...

    async def record(self, directory: str, name: str, config: dict[str, Any] | None, *, enabled: bool) -> None:
        """Record a change before this process makes it (``config`` None: keep the configuration
        the server has). Raises when it cannot be recorded: nothing is to change then."""
        ...

    def of(self, directory: str) -> list[McpChange]:
        """The directory's changes this process knows, oldest first."""
        ...

    async def refresh(self) -> None:
        """Apply every change committed by now (another process's notification may be on its way)."""
        ...


class OneProcess:
    async def start(self, apply: Apply) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def record(self, directory: str, name: str, config: dict[str, Any] | None, *, enabled: bool) -> None:
        pass

    def of(self, directory: str) -> list[McpChange]:
        return []

    async def refresh(self) -> None:
        pass


class SharedChanges:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._known: dict[tuple[str, str], McpChange] = {}
        self._recording: set[tuple[str, str]] = set()  # changes being made here: not to apply
        self._apply: Apply | None = None
        self._following = Following(db, CHANNEL, self._read)

    async def start(self, apply: Apply) -> None:
        self._apply = apply
        await self._following.start()

    async def stop(self) -> None:
        await self._following.stop()

    async def refresh(self) -> None:
        await self._read()

    async def record(self, directory: str, name: str, config: dict[str, Any] | None, *, enabled: bool) -> None:
        key = (directory, name)
        self._recording.add(key)
        try:
            async with self._db.write(urgent=True) as scope:
                change = await mcp_changes.record(scope, directory, name, config, enabled)
            self._known[key] = change  # made here by the caller: not applied again
        finally:
            self._recording.discard(key)
        await self._following.tell_others()

    def of(self, directory: str) -> list[McpChange]:
        changes = [change for (where, _), change in self._known.items() if where == directory]
        return sorted(changes, key=lambda change: change.version)

    async def _read(self) -> None:
        for change in await mcp_changes.every(self._db):
            key = (change.directory, change.name)
            known = self._known.get(key)
            if key not in self._recording and (known is None or known.version < change.version):
                self._known[key] = change
                if self._apply is not None:
                    await self._apply(change)
