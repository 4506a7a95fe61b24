"""The ``credentials`` table: provider credentials kept in a database several processes share
(``SharedCredentials``, the ``Keeper`` of app/providers/credentials.py), so a key saved through
any process is every process's, wherever each runs.

Every process reads them from memory on each turn and keeps that copy current: a change is told
to the others with a notification once it has committed (they read the table again), and each
reads it every ``REFRESH_S`` anyway, so a notification lost while the database was away delays a
change but never hides it. The process that made a change uses it at once.

The keys are stored as OpenCode stores them in ``auth.json``, in plain text: whoever can read the
database (or its backups) can read them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from contextlib import suppress

from app.jsonutil import dumps, loads
from app.providers.credentials import Edit, Saved
from app.store import sql
from app.store.database import Database, Reader

log = logging.getLogger("opensession.credentials")

CHANNEL = "opensession_credentials"
HOLD = "opensession:credentials"  # held by each change, so concurrent changes never lose one
REFRESH_S = 5.0


async def every(reader: Reader) -> Saved:
    saved: Saved = {}
    for provider_id, info in await reader.fetch(sql.ALL_CREDENTIALS):
        decoded = loads(info)
        if isinstance(decoded, dict):
            saved[provider_id] = decoded
    return saved


class SharedCredentials:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._saved: Saved = {}
        self._stamp = 0  # counts the changes of ``_saved``
        self._wanted = asyncio.Event()  # read the table again (a notification, a change here)
        self._task: asyncio.Task[None] | None = None

    def current(self) -> tuple[Hashable, Saved]:
        return self._stamp, self._saved

    async def start(self) -> None:
        await self._read()
        await self._db.listen(CHANNEL, lambda _payload: self._wanted.set())
        self._task = asyncio.create_task(self._keep_current(), name="credentials:refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def change(self, edit: Edit) -> None:
        async with self._db.write(urgent=True) as scope:
            await scope.hold(HOLD)
            before = await every(scope)
            saved = {provider_id: dict(info) for provider_id, info in before.items()}
            if not edit(saved):
                return
            for provider_id in before.keys() - saved.keys():
                scope.execute(sql.DELETE_CREDENTIAL, {"provider_id": provider_id})
            for provider_id, info in saved.items():
                if before.get(provider_id) != info:
                    scope.execute(sql.UPSERT_CREDENTIAL, {"provider_id": provider_id, "info": dumps(info)})
        self._adopt(saved)
        try:
            await self._db.notify(CHANNEL, "")
        except Exception:  # stored: the others read it within REFRESH_S all the same
            log.warning("could not tell the other processes of a credential change", exc_info=True)

    def _adopt(self, saved: Saved) -> None:
        if saved != self._saved:
            self._saved = saved
            self._stamp += 1

    async def _read(self) -> None:
        """Read the table; a change made here meanwhile (newer than the read) wins."""
        stamp = self._stamp
        saved = await every(self._db)
        if self._stamp == stamp:
            self._adopt(saved)
        else:
            self._wanted.set()

    async def _keep_current(self) -> None:
        while True:
            with suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_S):
                    await self._wanted.wait()
            self._wanted.clear()
            try:
                await self._read()
            except Exception:  # the database may be away: the next round reads again
                log.debug("could not read the credentials", exc_info=True)
