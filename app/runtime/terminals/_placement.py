"""Where terminals are served. A pty is held by a keeper on the machine of the server that made
it, so it cannot leave that machine; what a cluster shares is the knowledge of which process
serves each one.

- One process (SQLite): ``Alone``, nothing to record.
- Several processes on one PostgreSQL database: ``Shared`` records each pty this process serves
  (its info, this process's origin and advertised URL) in ``pty_owners`` when it is created,
  taken up or changes, renews the rows every third of ``lease_seconds``, and removes them when
  the pty goes or the process stops. The others list those rows and forward what concerns one of
  them to its owner's URL (``app/api/pty_forward.py``). A process that dies stops renewing: its
  rows expire, unless another process of the machine took its ptys up and wrote them again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

from app.clock import now_ms
from app.jsonutil import dumps, loads
from app.store import pty_owners
from app.store.database import Database, WriteScope

log = logging.getLogger("opensession.terminals")


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A terminal another live process owns: requests for it go to ``url``."""

    pty_id: str
    owner: str
    url: str


class Placed(Protocol):
    """What placement reads of a terminal (``Terminal`` is one)."""

    @property
    def id(self) -> str: ...

    directory: str
    info: dict[str, Any]


class Placement(Protocol):
    async def record(self, terminal: Placed) -> None:
        """The terminal was created or changed: the others see it as it is now."""

    async def forget(self, pty_id: str) -> None:
        """The terminal is gone: nobody forwards to it any more."""

    async def elsewhere(self, pty_id: str) -> Elsewhere | None:
        """Where another live process holds ``pty_id``; None when none does."""

    async def others(self, directory: str) -> list[dict[str, Any]]:
        """The infos of the directory's terminals that other live processes hold."""

    async def stop(self, left: frozenset[str]) -> None:
        """This process stops; the terminals ``left`` run on, for another to take up."""


class Alone:
    """The only process: every terminal is here."""

    async def record(self, terminal: Placed) -> None:
        return None

    async def forget(self, pty_id: str) -> None:
        return None

    async def elsewhere(self, pty_id: str) -> Elsewhere | None:
        return None

    async def others(self, directory: str) -> list[dict[str, Any]]:
        return []

    async def stop(self, left: frozenset[str]) -> None:
        return None


class Shared:
    """Invariant: while this process runs, each of its terminals has a live row naming it."""

    def __init__(
        self, db: Database, origin: str, url: str, lease_seconds: float, held: Callable[[], Iterable[Placed]]
    ) -> None:
        self._db = db
        self._owner = pty_owners.Owner(origin, url)
        self._lease_ms = int(lease_seconds * 1000)
        self._held = held
        self._renewing: asyncio.Task[None] | None = None

    def _save(self, scope: WriteScope, terminal: Placed, expires_at: int) -> None:
        pty_owners.save(scope, terminal.id, terminal.directory, self._owner, dumps(terminal.info), expires_at)

    async def record(self, terminal: Placed) -> None:
        async with self._db.write(urgent=True) as scope:
            self._save(scope, terminal, now_ms() + self._lease_ms)
        if self._renewing is None:
            self._renewing = asyncio.create_task(self._renew(), name="terminals:renew")

    async def forget(self, pty_id: str) -> None:
        async with self._db.write(urgent=True) as scope:
            pty_owners.drop(scope, pty_id)

    async def elsewhere(self, pty_id: str) -> Elsewhere | None:
        owner = await pty_owners.owner(self._db, pty_id, now_ms())
        if owner is None or owner.origin == self._owner.origin:
            return None
        return Elsewhere(pty_id, owner.origin, owner.url)

    async def others(self, directory: str) -> list[dict[str, Any]]:
        rows = await pty_owners.in_directory(self._db, directory, now_ms())
        return [loads(row.info) for row in rows if row.owner != self._owner.origin]

    async def _renew(self) -> None:
        """Every third of a lease: this process's rows again (written whole, so a row another
        process removed as expired while this one was paused comes back), and the rows of
        processes that stopped renewing a lease ago are removed."""
        interval = max(self._lease_ms / 3000, 0.2)
        while True:
            await asyncio.sleep(interval)
            held = list(self._held())
            if not held:
                continue
            try:
                now = now_ms()
                async with self._db.write() as scope:
                    for terminal in held:
                        self._save(scope, terminal, now + self._lease_ms)
                    pty_owners.drop_expired(scope, now - self._lease_ms)
            except Exception:
                log.exception("renewing this process's terminals failed")

    async def stop(self, left: frozenset[str]) -> None:
        """A clean stop: the rows of this process's terminals go at once, not after their expiry,
        but those of the terminals ``left`` running: whichever process takes one up writes its
        row again, and until then a request for it waits for that (``app/api/pty_forward.py``)."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
        with suppress(Exception):
            async with self._db.write() as scope:
                for terminal in self._held():
                    if terminal.id not in left:
                        pty_owners.drop(scope, terminal.id)
