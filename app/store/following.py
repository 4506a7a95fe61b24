"""Keeping this process's copy of a small shared table current (provider credentials, MCP servers'
run-time changes): a process that changes the table notifies the others once it has committed, and
each reads it again on a notification and every ``REFRESH_S`` anyway, so a notification lost while
the database was away delays a change but never hides it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

from app.store.database import Database

log = logging.getLogger("opensession.following")

REFRESH_S = 5.0


class Following:
    def __init__(self, db: Database, channel: str, read: Callable[[], Awaitable[None]]) -> None:
        self._db = db
        self._channel = channel
        self._read = read
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    async def start(self) -> None:
        """Listen for the others' changes and read the table now, then keep reading it."""
        await self._db.listen(self._channel, lambda _payload: self._wanted.set())
        await self._read()
        self._task = asyncio.create_task(self._keep_current(), name=f"following:{self._channel}")

    async def stop(self) -> None:
        """Ends the reads, one under way too; the loop also ends on its own at its next round,
        should a callee swallow the cancellation."""
        self._stopped = True
        self._wanted.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)  # a cancelled caller still is
            self._task = None

    def again(self) -> None:
        """Read the table again soon (a read that may have missed a change)."""
        self._wanted.set()

    async def tell_others(self) -> None:
        """This process committed a change: the others read the table again. Never raises."""
        try:
            await self._db.notify(self._channel, "")
        except Exception:  # committed: the others read it within REFRESH_S all the same
            log.warning("could not tell the other processes of a change (%s)", self._channel, exc_info=True)

    async def _keep_current(self) -> None:
        while True:
            with suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_S):
                    await self._wanted.wait()
            self._wanted.clear()
            if self._stopped:
                return
            try:
                await self._read()
            except Exception:  # the database may be away: the next round reads again
                log.debug("could not read what %s follows", self._channel, exc_info=True)
