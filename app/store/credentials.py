"""The ``credentials`` table: provider credentials kept in a database several processes share
(``SharedCredentials``, the ``Keeper`` of app/providers/credentials.py), so a key saved through
any process is every process's, wherever each runs. Every process reads them from memory on each
turn and keeps that copy current (``following``); the process that made a change uses it at once.

The keys are stored as OpenCode stores them in ``auth.json``, in plain text: whoever can read the
database (or its backups) can read them."""

from __future__ import annotations

from collections.abc import Hashable

from app.jsonutil import dumps, loads
from app.providers.credentials import Edit, Saved
from app.store import sql
from app.store.database import Database, Reader
from app.store.following import Following

CHANNEL = "opensession_credentials"
HOLD = "opensession:credentials"  # held by each change, so concurrent changes never lose one


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
        self._following = Following(db, CHANNEL, self._read)

    def current(self) -> tuple[Hashable, Saved]:
        return self._stamp, self._saved

    async def start(self) -> None:
        await self._following.start()

    async def stop(self) -> None:
        await self._following.stop()

    async def refresh(self) -> None:
        await self._read()

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
        await self._following.tell_others()

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
            self._following.again()
