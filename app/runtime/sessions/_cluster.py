"""Drain ownership across server processes that share one PostgreSQL database.

- A process drains a session only while it holds the session's lease (``leases``: owner, a
  fencing token that grows with every new lease, an expiry). ``claim`` takes a free, expired or
  own lease; when another live process holds it, that process is told to wake (the prompt is
  already durable, so its drain loop picks it up) and nothing runs here.
- Status: a session is busy, on every process, while it has a lease (``holders``). Admission
  reserves a free session's lease for its own process in the admission's transaction
  (``reserve``), so the prompt is busy everywhere from its commit, before its drain claims the
  lease; a drain releases it before announcing idle, and keeps it when a prompt admitted since
  its claim waits (``release(..., unless_admitted_after=)``). A lease a live owner holds without
  a drain (its claim or release failed) is woken by that owner's watchdog; one whose owner died
  expires and is taken over; so none stays busy without work.
- Fencing: the drain task writes under ``FENCE`` (session, owner, token); every write
  transaction checks the lease inside the transaction, so an owner that lost its lease (paused,
  partitioned, presumed dead) can never write into the session again (``LeaseLost``).
- Liveness: each process renews its leases every third of the lease time. A process that dies
  stops renewing; the watchdog of any other process finds the expired lease, claims the session
  (a takeover), closes what the dead drain left open (and finishes a revert it was moving files
  for, through ``takeovers``), and answers the admitted prompts.
- A graceful stop expires its leases at once, so the takeover does not wait for the expiry.
- Control messages (wake, abort, interrupt) travel to a lease's owner through NOTIFY.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, Protocol

from app.clock import now_ms
from app.events.log import Transaction
from app.events.topology import FENCE
from app.jsonutil import dumps, loads
from app.runtime.errors import SessionNotFound
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions._coordinator import Lease
from app.runtime.sessions._recovery import StepChanges, close_session
from app.runtime.sessions._service import SessionService
from app.store import sql

log = logging.getLogger("opensession.cluster")

CONTROL = "opensession_control"


class Controlled(Protocol):
    """What control messages act on (the drain coordinator)."""

    def wake(self, session_id: str) -> None: ...

    def is_active(self, session_id: str) -> bool: ...

    def is_held(self, session_id: str) -> bool: ...

    async def interrupt(self, session_id: str, reason: str = "abort", *, settle_through: int | None = None) -> bool: ...


class Cluster:
    def __init__(self, infra: Infrastructure, sessions: SessionService) -> None:
        self.infra = infra
        self.db = infra.db
        self.sessions = sessions
        self.lease_ms = int(infra.settings.lease_seconds * 1000)
        self.origin = infra.log.origin
        self._target: Controlled | None = None
        self._changes: StepChanges | None = None  # gives a taken-over session's open step its patch
        self._watchdog: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[Any]] = set()
        # Further control operations, by name (the Runtime adds what other domains answer).
        self.handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {}
        # What other domains finish in a session taken over (given its id), after its turn.
        self.takeovers: list[Callable[[str], Awaitable[None]]] = []

    async def start(self, target: Controlled, changes: StepChanges | None = None) -> None:
        self._target = target
        self._changes = changes
        await self.db.listen(CONTROL, self._received)
        self._watchdog = asyncio.create_task(self._watch(), name="cluster:watchdog")

    async def stop(self) -> None:
        """Give up every lease at once (expired, not deleted: whoever claims next recovers)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with suppress(asyncio.CancelledError):
                await self._watchdog
        with suppress(Exception):
            async with self.db.write() as scope:
                scope.execute(sql.LEASE_RENEW, {"owner": self.origin, "expires_at": 0})

    # -- leases ------------------------------------------------------------------------------

    def reserve(self, tx: Transaction, session_id: str) -> None:
        """In an admission's transaction: the session's lease for this process if nobody has it
        (its drain claims it next), so every process reads the session busy from this commit."""
        params = {"session_id": session_id, "owner": self.origin, "expires_at": now_ms() + self.lease_ms}
        tx.execute(sql.LEASE_RESERVE, params)

    async def claim(self, session_id: str) -> Lease | None:
        """The new lease, or None when another live process drains the session (it has been
        told to wake). A takeover from a dead owner closes what it left open first."""
        now = now_ms()
        async with self.db.write() as scope:
            before = await scope.fetch(sql.LEASE, {"session_id": session_id})
            params = {"session_id": session_id, "owner": self.origin, "expires_at": now + self.lease_ms, "now": now}
            taken = await scope.fetch(sql.LEASE_ACQUIRE, params)
            last = await scope.fetch(sql.MAX_SEQ, {"session_id": session_id}) if taken else []
        previous = before[0][0] if before else None
        if not taken:
            if previous is not None:
                await self.send(previous, "wake", session_id)
            return None
        token = int(taken[0][0])
        lease = Lease(token, last[0][0] if last and last[0][0] is not None else -1)
        if previous is not None and previous != self.origin:
            log.info("taking over %s from %s", session_id, previous)
            fenced = FENCE.set((session_id, self.origin, token))  # the closing writes check the new lease
            try:
                await self.close_open(session_id)
            finally:
                FENCE.reset(fenced)  # the caller (a drain, or a hold) decides what it writes under
        return lease

    async def close_open(self, session_id: str) -> None:
        """Close what a dead or failed drain (or revert) left open in a session this process now
        holds."""
        with suppress(SessionNotFound):
            session = await self.sessions.get(session_id)
            await close_session(self.infra.log, self.infra.queries, session, self._changes)
            for finish in self.takeovers:
                await finish(session_id)

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool:
        """Give the lease up; with ``unless_admitted_after`` (a session seq) only if no input
        admitted after it waits, checked in the same transaction (admissions are writes too, so
        none slips in between). Returns whether it was given up."""
        async with self.db.write() as scope:
            if unless_admitted_after is not None:
                params = {"session_id": session_id, "after_seq": unless_admitted_after}
                if await scope.fetch(sql.UNSETTLED_INPUTS_AFTER, params):
                    return False
            scope.execute(sql.LEASE_RELEASE, {"session_id": session_id, "owner": self.origin, "token": lease.token})
        return True

    async def owners(self) -> dict[str, str]:
        """Sessions drained right now, anywhere in the cluster: session id -> owner."""
        return {row[0]: row[1] for row in await self.db.fetch(sql.LIVE_LEASES, {"now": now_ms()})}

    async def others(self) -> set[str]:
        """Sessions another live process drains right now."""
        return {sid for sid, owner in (await self.owners()).items() if owner != self.origin}

    async def holders(self) -> dict[str, str]:
        """Every session with a lease, live or expired (about to be taken over): session id ->
        owner. Each of them is busy."""
        return {row[0]: row[1] for row in await self.db.fetch(sql.ALL_LEASES)}

    async def _watch(self) -> None:
        """Renew this process's leases; wake the sessions whose lease expired (a takeover), and
        those whose lease is ours but unused by any drain or hold of ours two rounds running (a
        claim or a release the database refused; one round could be a drain just ending)."""
        interval = max(self.lease_ms / 3000, 0.2)
        unused: set[str] = set()
        while True:
            await asyncio.sleep(interval)
            try:
                async with self.db.write() as scope:
                    scope.execute(sql.LEASE_RENEW, {"owner": self.origin, "expires_at": now_ms() + self.lease_ms})
                leases = await self.db.fetch(sql.ALL_LEASES)
            except Exception:
                log.exception("lease renewal failed")
                continue
            assert self._target is not None
            now, seen, unused = now_ms(), unused, set()
            for session_id, owner, expires_at in leases:
                if self._target.is_active(session_id):
                    continue
                if expires_at < now:
                    self._target.wake(session_id)
                elif owner == self.origin and not self._target.is_held(session_id):
                    if session_id in seen:
                        self._target.wake(session_id)
                    else:
                        unused.add(session_id)

    # -- control messages --------------------------------------------------------------------

    async def send(self, to: str, op: str, session_id: str, **extra: Any) -> None:
        await self.db.notify(CONTROL, dumps({"to": to, "op": op, "s": session_id, **extra}))

    async def forward(self, session_id: str, op: str, **extra: Any) -> bool:
        """Ask the process draining ``session_id`` to ``op`` it and wait (up to a lease time) until
        that drain has ended; False when no other process drains it."""
        owner = (await self.owners()).get(session_id)
        if owner is None or owner == self.origin:
            return False
        await self.send(owner, op, session_id, **extra)
        deadline = time.monotonic() + self.lease_ms / 1000
        while time.monotonic() < deadline and (await self.owners()).get(session_id) == owner:
            await asyncio.sleep(0.05)
        return True

    def _received(self, payload: str) -> None:
        message = loads(payload)
        if message.get("to") != self.origin or self._target is None:
            return
        session_id, op = message["s"], message["op"]
        if op == "wake":
            self._target.wake(session_id)
            return
        if op in ("abort", "interrupt"):
            through = message.get("through") if op == "abort" else None
            work: Awaitable[Any] = self._target.interrupt(session_id, settle_through=through)
        elif op in self.handlers:
            work = self.handlers[op](message)
        else:
            log.warning("unknown control operation %r", op)
            return
        task = asyncio.ensure_future(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
