"""Per-session drain coordinator: at most one drain per session, any number of sessions at once.

- ``wake`` starts a drain when the session is idle, otherwise records a pending wake; any number
  of wakes during one drain coalesce into one more pass, so waiters see one busy period.
- ``interrupt`` fires the drain's abort signal, clears pending wakes and waits for it to settle.
- ``hold`` keeps a session still while an operation that moves its history runs (revert, message
  and part edits): it is refused while a drain runs, and a wake meanwhile starts the drain only
  when the hold ends. The busy check and the claim are one synchronous step, so no turn can start
  between an operation's check and its write.
- Status (busy / retry / idle) is set here and nowhere else. The active set and the status map
  change together, synchronously (no await in between), so ``active()`` and ``statuses()`` agree
  at every moment, and each change is announced at once, in order.
- A drain runs under the session's lease (``Claims``, the topology's). In one process every lease
  is granted at once, so busy is announced with the wake. On a shared database the lease is what
  every process reads as busy (admission reserves it in its own transaction;
  ``SessionsDomain.statuses``), so a drain gives it up before it announces idle, and only when no
  prompt it has not seen waits: one admitted after its claim makes it go round again instead
  (``release(..., unless_admitted_after=)``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from app.events.topology import LeaseLost
from app.runtime.abort import LOST, Aborted, AbortSignal
from app.runtime.errors import DatabaseUnavailable, SessionBusy
from app.wire import BusyStatus, IdleStatus, SessionStatus

log = logging.getLogger("opensession.coordinator")

Drain = Callable[[str, AbortSignal], Awaitable[None]]
T = TypeVar("T")
StatusListener = Callable[[str, SessionStatus], None]

RETRY_UNAVAILABLE_SECONDS = 1.0
# How long a stopping process lets the history operations in flight (holds: a revert moving
# files) end before it gives their sessions up: one handed off halfway is finished by the taker.
HOLDS_END_WITHIN_S = 5.0
BUSY: BusyStatus = {"type": "busy"}
IDLE: IdleStatus = {"type": "idle"}


@dataclass
class _Entry:
    signal: AbortSignal = field(default_factory=AbortSignal)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    pending_wake: bool = False  # the drain goes round once more
    # Woken while it ran (a prompt admitted meanwhile): another pass unless its release sees
    # that no prompt admitted since its claim waits (``Claims.release_sees_admissions``).
    woken: bool = False
    task: asyncio.Task[None] | None = None
    # The lease the drain runs under, while it holds it (None before its claim, and from the
    # moment it starts to give it up): what ``lost`` compares with.
    lease: Lease | None = None

    @property
    def again(self) -> bool:
        """Whether another drain is due once this one has ended."""
        return self.pending_wake or self.woken


@dataclass(frozen=True, slots=True)
class Lease:
    """A claimed lease: its fencing ``token``, and the session's last seq when it was claimed
    (inputs admitted after it are news to the holder)."""

    token: int
    seq: int


class Claims(Protocol):
    """Drain ownership (the topology's): a drain runs only under a claimed lease."""

    release_sees_admissions: bool
    """Whether ``release(..., unless_admitted_after=)`` checks for prompts admitted since (a
    shared database): then a wake during a drain costs no pass of its own."""

    def claim_at_once(self, session_id: str) -> Lease | None:
        """The lease, when it is granted without asking anyone (one process); else None: ``claim``."""
        ...

    async def claim(self, session_id: str) -> Lease | None:
        """The lease, or None when another process drains the session."""
        ...

    def fence(self, session_id: str, lease: Lease) -> Callable[[], None]:
        """Make the calling task's writes (and its children's) check ``lease``; returns what
        ends that (a task that ends with the lease need not call it)."""
        ...

    def lease_left(self, session_id: str) -> float:
        """Seconds this process's lease on ``session_id`` is sure to last, by its own clock (at
        most 0: it may have run out, or was never this process's). What a lease guards outside
        the database (files moved on disk) checks it right before each step: a transaction's
        check of the lease says nothing about a step taken after a stall."""
        ...

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool: ...

    async def close_open(self, session_id: str) -> None: ...


class DrainCoordinator:
    """A lease ``claims`` cannot grant at once (a database shared by several processes) is
    claimed by the drain, which announces busy once it holds it (the session reads busy
    everywhere already: its admission reserved the lease); when another process holds it, that
    process is woken instead and nothing runs here."""

    def __init__(self, drain: Drain, on_status: StatusListener, claims: Claims) -> None:
        self._drain = drain
        self._on_status = on_status
        self._claims = claims
        self._entries: dict[str, _Entry] = {}
        self._status: dict[str, SessionStatus] = {}
        self._held: set[str] = set()
        self._hold_ended = asyncio.Event()
        self._shutting_down = False
        self._deferred: set[str] = set()  # held sessions woken meanwhile: they drain on release
        self.drains_started = 0  # observable for tests: how many drain loops ever ran

    def wake(self, session_id: str) -> None:
        if session_id in self._held:
            self._deferred.add(session_id)
            return
        entry = self._entries.get(session_id)
        if entry is not None:
            # Picked up by the running loop, or by a successor if the loop is already settling.
            entry.woken = True
            return
        self._start(session_id)

    def _start(self, session_id: str, work: Drain | None = None) -> _Entry:
        entry = _Entry()
        self._entries[session_id] = entry
        self.drains_started += 1
        lease = entry.lease = self._claims.claim_at_once(session_id)
        if lease is not None:
            self.set_status(session_id, BUSY)
        entry.task = asyncio.create_task(self._run(session_id, entry, lease, work), name=f"drain:{session_id}")
        return entry

    async def run_exclusive(self, session_id: str, work: Callable[[AbortSignal], Awaitable[T]]) -> T:
        """Run ``work`` as the session's one execution (a user shell command): busy meanwhile,
        interruptible by abort, refused with SessionBusy if something already runs. Prompts
        arriving meanwhile wait for it (a pending wake) and run after it."""
        if session_id in self._entries or session_id in self._held:
            raise SessionBusy(session_id)
        outcome: dict[str, Any] = {}

        async def job(_session_id: str, signal: AbortSignal) -> None:
            try:
                outcome["value"] = await work(signal)
            except BaseException as exc:
                outcome["error"] = exc
                raise

        entry = self._start(session_id, job)
        await entry.done.wait()
        if "error" in outcome:
            raise outcome["error"]
        if "value" not in outcome:  # another process holds the session
            raise SessionBusy(session_id)
        value: T = outcome["value"]
        return value

    def lease_left(self, session_id: str) -> float:
        """Seconds this process's lease on ``session_id`` is sure to last (``Claims.lease_left``)."""
        return self._claims.lease_left(session_id)

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Claim the idle session for an operation that must not overlap a turn; raises
        SessionBusy if a drain runs or another hold is in place. The local check and mark happen
        before the first await; the hold also takes the session's lease, so no other process starts
        a drain meanwhile (it wakes this one, which drains afterwards). The operation writes
        under that lease, as a drain does: if another process took the session over meanwhile
        (this one was cut off past the lease, or handed it off), its writes are refused and it
        ends with SessionBusy, whatever it left under way being the taker's to finish."""
        if session_id in self._entries or session_id in self._held:
            raise SessionBusy(session_id)
        self._held.add(session_id)
        lease: Lease | None = None
        try:
            lease = self._claims.claim_at_once(session_id) or await self._claims.claim(session_id)
            if lease is None:
                raise SessionBusy(session_id)
            unfence = self._claims.fence(session_id, lease)
            try:
                yield
            except LeaseLost as exc:
                lease = None  # the taker's now
                raise SessionBusy(session_id) from exc
            finally:
                unfence()
        finally:
            woken = session_id in self._deferred
            if lease is not None and not woken:
                # A prompt admitted meanwhile (here, or on a process that left it to this hold's
                # lease) keeps the lease for the drain that answers it.
                woken = await self._kept(session_id, lease, lease.seq)
            self._held.discard(session_id)
            self._hold_ended.set()
            self._deferred.discard(session_id)
            if woken:
                self._start(session_id)

    async def _claim(self, session_id: str) -> Lease | None:
        """The session's lease, or None when another process drains it. One that could not be
        claimed (the database refused) stays reserved here: the watchdog wakes it again."""
        try:
            lease = await self._claims.claim(session_id)
        except Exception:
            log.exception("could not claim %s", session_id)
            return None
        if lease is not None:
            self._claims.fence(session_id, lease)
            self.set_status(session_id, BUSY)
        return lease

    async def _kept(self, session_id: str, lease: Lease, unless_admitted_after: int | None) -> bool:
        """Give the lease up, unless a prompt admitted after seq ``unless_admitted_after`` waits
        (None: unconditionally); returns whether it was kept for that prompt, which then needs
        another pass. A release the database refuses leaves the lease here, unused: the watchdog
        wakes the session again (``ClusterTopology``)."""
        try:
            return not await self._claims.release(session_id, lease, unless_admitted_after=unless_admitted_after)
        except Exception:
            log.exception("could not release %s", session_id)
            return False

    async def _kept_by(self, entry: _Entry, session_id: str, lease: Lease, unless_admitted_after: int | None) -> bool:
        """``_kept`` for a drain: while its release is in flight the lease is no longer the
        drain's to lose (the row may vanish by its own doing)."""
        entry.lease = None
        kept = await self._kept(session_id, lease, unless_admitted_after)
        entry.lease = lease if kept else None
        return kept

    async def _resume_after_outage(self, session_id: str, entry: _Entry) -> bool:
        """Wait for the database to come back, then close the reply the failed step left open
        (this process still holds the session); False if a shutdown came first. An abort waits
        too: given up here, it would leave that reply open, and the prompt it answered unsettled,
        to be answered a second time by the session's next drain."""
        while True:
            try:
                await entry.signal.sleep(RETRY_UNAVAILABLE_SECONDS)
            except Aborted as exc:
                if exc.reason != "abort" or self._shutting_down:
                    return False
                await asyncio.sleep(RETRY_UNAVAILABLE_SECONDS)
            try:
                await self._claims.close_open(session_id)
                return True
            except DatabaseUnavailable:
                continue

    async def _run(self, session_id: str, entry: _Entry, lease: Lease | None, work: Drain | None = None) -> None:
        """Drain under ``lease``, claimed first when none was granted at once."""
        holding = False  # whether ``lease`` is still this drain's to give up
        lost = False  # another process took the session over: its drain announces the status
        try:
            if lease is None and (lease := await self._claim(session_id)) is None:
                return
            holding, entry.lease = True, lease
            while True:
                entry.pending_wake = entry.woken = False
                # The first pass runs ``work`` when given (run_exclusive), later passes drain.
                drain, work = work or self._drain, None
                try:
                    await drain(session_id, entry.signal)
                except Aborted as exc:
                    lost = exc.reason == LOST
                    holding = not lost
                    break
                except LeaseLost:
                    log.warning("%s was taken over by another process; this drain stops", session_id)
                    holding, lost = False, True
                    break
                except DatabaseUnavailable as exc:
                    # Nothing of the failed transaction was stored: retry once the database is back
                    # (a shutdown still ends the wait). An abort that came meanwhile is carried out
                    # by that pass, which finds its signal fired.
                    log.warning("drain of %s paused: %s", session_id, exc)
                    if not await self._resume_after_outage(session_id, entry):
                        break
                    entry.pending_wake = True
                    continue
                except Exception:
                    # It may have left a reply open that it could not close (a write refused):
                    # the lease stays, unused, over it. The watchdog wakes the session here
                    # again, and the next drain closes the reply first; if this process dies
                    # meanwhile, the takeover of its lease closes it. Given up, a claim with no
                    # previous owner would close nothing: the reply would stay open for good.
                    log.exception("drain of %s failed", session_id)
                    holding = False
                    break
                if entry.signal.fired:
                    break
                if entry.pending_wake or (entry.woken and not self._claims.release_sees_admissions):
                    continue
                # Done: given up unless a prompt came in after the last read (admitted here, or on
                # another process, which left it to this drain); then one more pass, the same busy
                # period. (Where the release cannot tell, a wake meanwhile made that pass above.)
                entry.woken = False  # the release answers what woke it so far; a wake from now is new
                if not await self._kept_by(entry, session_id, lease, lease.seq):
                    holding = False
                    break
                entry.pending_wake = True
        finally:
            shutting_down = entry.signal.fired and entry.signal.reason == "shutdown"
            if lease is not None and holding and not shutting_down and not entry.again:
                # Given up before idle is announced, so no process reads busy after that. After an
                # abort, prompts it settles wait no more; prompts admitted later keep the lease
                # (on another process, its admission left it to this drain: ``Topology.reserve``).
                # (A stopping process leaves its leases to expire; a successor keeps this one.)
                settled = entry.signal.settle_through if entry.signal.fired else lease.seq
                if await self._kept_by(entry, session_id, lease, settled):
                    entry.pending_wake = True
            entry.lease = None
            if self._entries.get(session_id) is entry:
                del self._entries[session_id]
            if shutting_down or lost:
                self._status.pop(session_id, None)
            elif lease is not None:
                self.set_status(session_id, IDLE)
            entry.done.set()
            if entry.again and not shutting_down and session_id not in self._entries:
                self._start(session_id)

    async def interrupt(self, session_id: str, reason: str = "abort", *, settle_through: int | None = None) -> bool:
        """Stop the session's drain; returns whether one was running. Pending wakes are dropped;
        inputs admitted up to session seq ``settle_through`` and waiting behind the stopped step
        are settled unanswered (None: they stay for the next wake). A prompt admitted later wakes
        a new drain as usual."""
        entry = self._entries.get(session_id)
        if entry is None:
            return False
        entry.pending_wake = entry.woken = False
        entry.signal.fire(reason, settle_through=settle_through)
        await entry.done.wait()
        return True

    def under_lease(self) -> dict[str, Lease]:
        """The drains running under a lease now, by session."""
        return {sid: entry.lease for sid, entry in self._entries.items() if entry.lease is not None}

    def lost(self, session_id: str, lease: Lease) -> None:
        """The session's lease was found with another owner or token after the drain had claimed
        ``lease`` (the drain's process was frozen, or cut off, past its expiry, and another
        process took the session over): stop the drain and what it runs (a shell command's
        processes are killed) at once. It writes nothing more: its writes would be refused."""
        entry = self._entries.get(session_id)
        if entry is None or entry.lease is not lease:
            return  # given up or claimed again since the lease was read
        log.warning("%s was taken over by another process; its drain and tools stop", session_id)
        entry.pending_wake = entry.woken = False
        entry.signal.fire(LOST)

    async def await_idle(self, session_id: str) -> None:
        while (entry := self._entries.get(session_id)) is not None:
            await entry.done.wait()

    @property
    def release_sees_admissions(self) -> bool:
        """Whether giving a drain's lease up finds by itself a prompt admitted since its claim
        (and keeps the lease for another pass): then a drain need not read once more only to
        learn that nothing waits."""
        return self._claims.release_sees_admissions

    def is_active(self, session_id: str) -> bool:
        """Whether a drain runs or is due to start (woken during a hold)."""
        return session_id in self._entries or session_id in self._deferred

    def is_held(self, session_id: str) -> bool:
        """Whether an operation holds the session still (its lease, on a shared database, is no
        drain's)."""
        return session_id in self._held

    def active(self) -> list[str]:
        """Sessions draining here (a drain still claiming its lease is not yet active)."""
        return list(self._status)

    def status(self, session_id: str) -> SessionStatus:
        return self._status.get(session_id, IDLE)

    def statuses(self) -> dict[str, SessionStatus]:
        return dict(self._status)

    def set_status(self, session_id: str, status: SessionStatus) -> None:
        if status["type"] == "idle":
            self._status.pop(session_id, None)
        else:
            self._status[session_id] = status
        self._on_status(session_id, status)

    async def shutdown(self) -> None:
        """Stop every drain without settling its work: admitted inputs stay pending and the next
        start recovers them. The holds in flight end first (for ``HOLDS_END_WITHIN_S`` at most)."""
        self._shutting_down = True
        deadline = asyncio.get_running_loop().time() + HOLDS_END_WITHIN_S
        while self._held:
            self._hold_ended.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._hold_ended.wait()
            except TimeoutError:
                break
        await asyncio.gather(*(self.interrupt(sid, "shutdown") for sid in list(self._entries)))
