"""The cluster topology: server processes that share one PostgreSQL database.

- A process drains a session only while it holds the session's lease (``leases``: owner, a
  fencing token that grows with every new lease, an expiry). ``claim`` takes a free, expired or
  own lease; when another live process holds it, that process is told to wake (the prompt is
  already durable, so its drain loop picks it up) and nothing runs here.
- Status: a session is busy, on every process, while it has a lease (``holders``). Admission
  reserves a free session's lease for its own process in the admission's transaction
  (``reserve``), so the prompt is busy everywhere from its commit, before its drain claims the
  lease; a drain releases it before announcing idle, and keeps it when a prompt admitted since
  its claim waits (``release(..., unless_admitted_after=)``). So a prompt admitted while another
  process drains the session is left to that drain: nothing is claimed or woken for it. A lease
  a live owner holds without a drain (its claim or release failed) is woken by that owner's
  watchdog; one whose owner died expires and is taken over; so none stays busy without work.
- Fencing: the drain task writes under ``FENCE`` (session, owner, token); every write
  transaction checks the lease inside the transaction, so an owner that lost its lease (paused,
  partitioned, presumed dead) can never write into the session again (``LeaseLost``).
- Liveness: each process renews its leases every third of the lease time (every second at
  most). A process that dies stops renewing; the watchdog of any other process finds the expired
  lease, claims the session (a takeover), closes what the dead drain left open (and finishes a
  revert it was moving files for, through ``takeovers``), and answers the admitted prompts. A
  death PostgreSQL sees (the process's connections ended: a crash, a kill -9) is not waited out:
  a process silent for ``SILENT_S`` whose presence lock is gone has its leases expired at once
  (``_departed``); one only silent (frozen, cut off) keeps them until they expire.
- A graceful stop hands off (``hand_off``, on SIGTERM before uvicorn waits for its connections):
  the process stops claiming (a wake it gets goes to every other process instead, an admission
  it still takes reserves an already expired lease), ends its drains, expires its leases and
  tells the others to claim those sessions now. Requests still in flight on it (a synchronous
  prompt) are answered from what another process drains.
- Placement: a session is drained where its directory is (tools, the shell and step snapshots
  work on it). An admission on a process whose machine lacks the directory, while others run,
  reserves the lease for nobody, already expired (busy everywhere, claimable at once), and asks
  the others to ``place`` it: one that has the directory claims it; one that lacks it says so.
  Once every process asked lacks it, or ``PLACEMENT_GRACE_MS`` has passed, the admitting
  process drains it itself (its tools fail on the missing files, as they would anywhere). A
  process without the directory also claims an expired lease only that much after its expiry
  (a takeover, a hand-off), so one that has it comes first. ``where`` asks which process has a
  directory (each answers with its address or that it lacks it), for the requests on files that
  ``app/api/placement.py`` forwards.
- Control messages (wake, place, abort, interrupt, and the permission and question replies the
  Runtime answers, ``serve_requests``) travel to a lease's owner through NOTIFY.
- Requests asked on other processes are followed from their relayed events, so a reply given
  here is sent where the asker waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from app.clock import now_ms
from app.events.bus import Overflowed, Subscription
from app.events.log import Transaction
from app.events.model import Event
from app.events.topology import FENCE
from app.jsonutil import dumps, loads
from app.observability import metrics
from app.runtime.errors import SessionNotFound
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions._coordinator import Lease
from app.runtime.sessions._recovery import StepChanges, close_session
from app.runtime.sessions._service import SessionService
from app.runtime.sessions._topology import Controlled, Handler, Memo, Patience, Takeover
from app.store import leases
from app.store.events import HeldLease

log = logging.getLogger("opensession.cluster")

CONTROL = "opensession_control"
EVERYONE = "*"  # a control message's address for every process but its sender
# What permission asks and questions asked on other processes are followed by (their own events,
# and tool parts closing, which end the requests of a process that died).
FOLLOWED_REQUEST_EVENTS = frozenset(
    {
        "permission.asked",
        "permission.replied",
        "question.asked",
        "question.replied",
        "question.rejected",
        "message.part.updated",
    }
)


# The status announcements of a session drained elsewhere that may mean it is idle now, and how
# long a wait for one lasts before the lease is read again (its owner may have died).
STATUS_EVENTS = frozenset({"session.status", "session.idle"})
ELSEWHERE_RECHECK_S = 1.0
FORWARD_RECHECK_S = 0.25  # a forwarded abort's wait re-reads the lease at least this often
# The owner of a lease reserved for whichever process has the session's directory (``reserve``),
# and how much longer than one that has it a process without the directory waits to claim.
NOBODY = ""
PLACEMENT_GRACE_MS = 2000
WHERE_WAIT_S = 1.0  # how long ``where`` waits for a process that has a directory to answer
# How long rows a process keeps (``memo``) are trusted: another process tells it of a change at
# once, and this bounds a change whose word was lost (a listener reconnecting after an outage).
MEMO_MAX_AGE_S = 5.0
# The watchdog's round at most (shorter with short leases), how long a process unheard from may
# be gone (each says it is there every second), and how long this process's own presence must
# have stood before it judges another's absence (``_departed``).
WATCH_S = 1.0
SILENT_S = 2.0
SETTLED_S = 3.0
# How much sooner than its expiry a lease is taken as run out, for what it guards outside the
# database: the clocks of the machines that may take it over may run ahead of this one's.
LEASE_MARGIN_S = 1.0


@dataclass
class _Question:
    """A ``where`` question: the first URL heard, or None once every process asked lacks it."""

    answer: asyncio.Future[str | None]
    waiting: set[str]  # the processes asked that have not answered yet


class ClusterTopology:
    # Another process may drain the session: the input is re-read on a timer, and five seconds
    # with nobody draining it mean it will not be answered now.
    patience = Patience(rounds=20, seconds=0.25)
    snapshots_beside_project = True

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
        self.handlers: dict[str, Handler] = {"forget": self._forget}
        self._memos: dict[str, Memo[Any, Any]] = {}
        # What other domains finish in a session taken over (given its id), after its turn.
        self.takeovers: list[Takeover] = []
        self._following: asyncio.Task[None] | None = None
        self._leaving = False  # handed off: this process claims nothing more
        # Each session under a lease of this process -> when (monotonic) the claim or renewal
        # that last extended it began: it lasts a lease from then (``lease_left``).
        self._extended_at: dict[str, float] = {}
        # Sessions admitted here and left to a process with their directory: the processes asked,
        # and those that answered that they lack it too. Once all of them have, ``_homeless``.
        self._placing: dict[str, tuple[frozenset[str], set[str]]] = {}
        self._homeless: set[str] = set()  # no process has the directory: claimed here at once
        self._asked: dict[str, _Question] = {}  # ``where`` questions waiting, by id

    async def start(self, target: Controlled, changes: StepChanges | None = None) -> None:
        self._target = target
        self._changes = changes
        await self.db.listen(CONTROL, self._received)
        self._watchdog = asyncio.create_task(self._watch(), name="cluster:watchdog")

    async def hand_off(self, shutdown: Callable[[], Awaitable[None]]) -> None:
        self._leaving = True
        await shutdown()  # the watchdog renews the leases while the holds in flight end
        await self._end_watchdog()  # it would renew the leases handed off
        self._extended_at.clear()  # a hold that outlasted the wait moves no more files
        held = [row.session_id for row in await leases.every(self.db) if row.owner == self.origin]
        await leases.renew(self.db, self.origin, now_ms())
        if held:  # one round trip for all of them
            await self.db.notify(CONTROL, *(self._message(EVERYONE, "wake", sid) for sid in held))
        log.info("handed %d sessions to the other processes", len(held))

    async def stop(self) -> None:
        """Give up every lease at once (expired, not deleted: whoever claims next recovers)."""
        await self._end_watchdog()
        if self._following is not None:
            await _cancelled(self._following)
        with suppress(Exception):
            await leases.renew(self.db, self.origin, now_ms())

    async def _end_watchdog(self) -> None:
        if self._watchdog is not None:
            await _cancelled(self._watchdog)
            self._watchdog = None

    def on_takeover(self, finish: Takeover) -> None:
        self.takeovers.append(finish)

    def memo(self, name: str) -> Memo[Any, Any]:
        return self._memos.setdefault(name, Memo(MEMO_MAX_AGE_S))

    async def changed(self, name: str) -> None:
        try:
            await self.send(EVERYONE, "forget", "", memo=name)
        except Exception:  # the change itself is committed; the others' copies age out instead
            log.warning("could not tell the other processes that %s changed", name, exc_info=True)

    async def _forget(self, message: dict[str, Any]) -> None:
        memo = self._memos.get(message.get("memo", ""))
        if memo is not None:
            memo.clear()

    # -- leases ------------------------------------------------------------------------------

    release_sees_admissions = True  # ``release`` checks them under the session's hold

    def claim_at_once(self, session_id: str) -> Lease | None:
        return None  # only the database knows who may drain it: ``claim``

    def fence(self, session_id: str, lease: Lease) -> Callable[[], None]:
        fenced = FENCE.set((session_id, self.origin, lease.token))  # the calling task's writes check the lease
        return lambda: FENCE.reset(fenced)

    def reserve(self, tx: Transaction, session_id: str, directory: str) -> bool:
        """In an admission's transaction: the session's lease for this process if nobody has it
        (its drain claims it next), so every process reads the session busy from this commit.
        Once handed off, one that has already expired: busy, and any other process may claim it.
        Where this machine lacks ``directory`` and other processes run, one reserved for nobody,
        expired too, and the others are asked to take it (``_place``, once it is durable).

        A live lease of another process, as read under the hold, is left to it and nothing is
        woken here: that drain's release (``release``, under the same hold) finds the prompt
        waiting and goes round again. Claiming it only to be refused, and waking the owner, were
        two round trips and a wasted pass of the owner's drain for every such prompt."""
        held, now = tx.held_leases.get(session_id), now_ms()
        live = held is not None and held.expires_at >= now
        if live and held is not None and held.owner != self.origin:
            return False
        if not live and not self._leaving and not self._here(directory):
            leases.reserve(tx.scope, session_id, NOBODY, now)
            tx.scope.when_durable(lambda: self._place(session_id, directory))
            return False
        leases.reserve(tx.scope, session_id, self.origin, now if self._leaving else now + self.lease_ms)
        return True

    def _here(self, directory: str) -> bool:
        """Whether this process is where a session in ``directory`` drains: its machine has the
        directory, or no other process runs."""
        return not self.infra.log.topology.peers() or os.path.isdir(directory)

    def _place(self, session_id: str, directory: str) -> None:
        """Ask the other processes to drain a session admitted here whose directory this machine
        lacks; drain it here once all of them lack it too, or after the grace."""
        asked = self.infra.log.topology.peers()
        if not asked:
            self._homeless.add(session_id)
            self._wake_here(session_id)
            return
        self._placing[session_id] = (asked, set())
        self._spawn(self.send(EVERYONE, "place", session_id, directory=directory))
        asyncio.get_running_loop().call_later(PLACEMENT_GRACE_MS / 1000 + 0.05, self._unplaced, session_id)

    def _unplaced(self, session_id: str) -> None:
        """The grace is over: claim it here unless a process with the directory did."""
        if self._placing.pop(session_id, None) is not None:
            self._wake_here(session_id)

    def _wake_here(self, session_id: str) -> None:
        if self._target is not None:
            self._target.wake(session_id)

    async def claim(self, session_id: str) -> Lease | None:
        """The new lease, or None when another live process drains the session (it has been
        told to wake). A takeover from a dead owner closes what it left open first."""
        if self._leaving:
            await self.send(EVERYONE, "wake", session_id)
            return None
        here = session_id in self._homeless or await self._has_directory(session_id)
        self._homeless.discard(session_id)
        now = now_ms()
        # Under the session's hold: a writer still draining under the old lease commits before
        # (and is then read back), or finds the lease changed (``LeaseLost``). Without the
        # directory, a lease counts as expired only a grace after its expiry.
        expired_before = now if here else now - PLACEMENT_GRACE_MS
        began = time.monotonic()
        claimed = await leases.claim(self.db, session_id, self.origin, now + self.lease_ms, expired_before)
        previous, token = claimed.previous_owner, claimed.token
        if token is None:
            if previous not in (None, NOBODY):
                await self.send(previous, "wake", session_id)
            return None
        self._extended_at[session_id] = began
        lease = Lease(token, claimed.last_seq)
        if not here:
            log.warning("draining %s here, though this machine lacks its directory: no process has it", session_id)
        if previous not in (None, NOBODY, self.origin):
            log.info("taking over %s from %s", session_id, previous)
            metrics.RECORDER.takeover()
            fenced = FENCE.set((session_id, self.origin, token))  # the closing writes check the new lease
            try:
                await self.close_open(session_id)
            finally:
                FENCE.reset(fenced)  # the caller (a drain, or a hold) decides what it writes under
        return lease

    async def where(self, directory: str) -> str | None:
        """The URL of another live process whose machine has ``directory``: the first to answer
        that it has it, within ``WHERE_WAIT_S``. None: every process asked lacks it, none
        answered in time (it died), or this process is alone."""
        asked = self.infra.log.topology.peers()
        if not asked:
            return None
        ask = secrets.token_hex(8)
        question = _Question(asyncio.get_running_loop().create_future(), set(asked))
        self._asked[ask] = question
        try:
            await self.send(EVERYONE, "where", "", directory=directory, ask=ask)
            async with asyncio.timeout(WHERE_WAIT_S):
                return await question.answer
        except TimeoutError:
            return None
        finally:
            self._asked.pop(ask, None)

    def _here_is(self, message: dict[str, Any]) -> None:
        """Answer a ``where`` question: this process's URL when its machine has the directory
        (and it is staying), else None, so the asker need not wait for a process that lacks it."""
        has = not self._leaving and os.path.isdir(message.get("directory", ""))
        url = self.infra.settings.reachable_url if has else None
        self._spawn(self.send(message["from"], "here", "", ask=message.get("ask", ""), url=url))

    def _heard_where(self, message: dict[str, Any]) -> None:
        question = self._asked.get(message.get("ask", ""))
        if question is None or question.answer.done():
            return
        question.waiting.discard(message["from"])
        if message.get("url"):
            question.answer.set_result(str(message["url"]))
        elif not question.waiting:
            question.answer.set_result(None)

    async def _has_directory(self, session_id: str) -> bool:
        """Whether this process is where the session drains (``_here``)."""
        if not self.infra.log.topology.peers():
            return True
        try:
            session = await self.sessions.get(session_id)
        except SessionNotFound:
            return True  # gone: whoever claims it finds nothing to do
        return os.path.isdir(session["directory"])

    async def close_open(self, session_id: str) -> None:
        """Close what a dead or failed drain (or revert) left open in a session this process now
        holds."""
        with suppress(SessionNotFound):
            session = await self.sessions.get(session_id)
            await close_session(self.infra.log, self.infra.queries, session, self._changes)
            for finish in self.takeovers:
                await finish(session_id)

    def lease_left(self, session_id: str) -> float:
        """From the claim or renewal that last extended the lease (its start, so the lease's
        expiry in the database is no earlier), less ``LEASE_MARGIN_S`` for the clocks of the
        machines that may take it over."""
        began = self._extended_at.get(session_id)
        if began is None:
            return -math.inf
        return began + self.lease_ms / 1000 - LEASE_MARGIN_S - time.monotonic()

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool:
        """Give the lease up; with ``unless_admitted_after`` (a session seq) only if no input
        admitted after it waits, checked in the same transaction (admissions are writes too, so
        none slips in between). Returns whether it was given up."""
        return await leases.release(
            self.db, session_id, self.origin, lease.token, unless_admitted_after=unless_admitted_after
        )

    async def owners(self) -> dict[str, str]:
        """Sessions drained right now, anywhere in the cluster: session id -> owner."""
        return await leases.live(self.db, now_ms())

    async def leases_held(self, draining: int) -> int:
        return sum(owner == self.origin for owner in (await self.owners()).values())

    async def leased_elsewhere(self) -> set[str]:
        """A lapsed lease is not proof its owner died (it may be stalled, or cut off from the
        database a moment), and nothing fences a write made without the lease: so what such a
        session left open is closed by the takeover that claims it (the watchdog wakes it once
        its lease has expired or its owner is gone), never by a start-up without a lease."""
        return {sid for sid, owner in (await self.holders()).items() if owner not in (self.origin, NOBODY)}

    def drains_under(self, lease: HeldLease | None) -> bool:
        return lease is not None and lease.owner != NOBODY  # reserved for nobody: no drain yet

    async def leased(self, session_id: str) -> bool:
        """A lease expired less than the placement grace ago counts: a process is about to claim
        it (a takeover, a hand-off, a session left to a process that has its directory)."""
        return await leases.live_owner(self.db, session_id, now_ms() - PLACEMENT_GRACE_MS) is not None

    async def reserved(self, held: Callable[[str], bool]) -> set[str]:
        """Every session with a lease is busy (read from the database, so every process answers
        alike, from the admission's commit on), but this process's own holds (a revert)."""
        return {sid for sid, owner in (await self.holders()).items() if owner != self.origin or not held(sid)}

    async def holders(self) -> dict[str, str]:
        """Every session with a lease, live or expired (about to be taken over): session id ->
        owner. Each of them is busy."""
        return {row.session_id: row.owner for row in await leases.every(self.db)}

    async def _watch(self) -> None:
        """Renew this process's leases; wake the sessions whose lease expired or whose owner is
        gone (a takeover), and those whose lease is ours but unused by any drain or hold of ours
        two rounds running (a claim or a release the database refused; one round could be a
        drain just ending)."""
        interval = min(max(self.lease_ms / 3000, 0.2), WATCH_S)
        unused: set[str] = set()
        assert self._target is not None
        while True:
            await asyncio.sleep(interval)
            draining = self._target.under_lease()  # claimed before the read: it must show them
            try:
                began = time.monotonic()
                await leases.renew(self.db, self.origin, now_ms() + self.lease_ms)
                held = await leases.every(self.db)
                gone = await self._departed(held)
            except Exception:
                log.exception("lease renewal failed")
                continue
            self._after_renewal(draining, held, began)
            now, seen, unused = now_ms(), unused, set()
            for session_id, owner, _, expires_at in held:
                if self._target.is_active(session_id):
                    continue
                if expires_at < now or owner in gone:
                    self._target.wake(session_id)
                elif owner == self.origin and not self._target.is_held(session_id):
                    if session_id in seen:
                        self._target.wake(session_id)
                    else:
                        unused.add(session_id)

    def _after_renewal(self, draining: Mapping[str, Lease], held: list[leases.Held], began: float) -> None:
        """The renewal that began at ``began`` found ``held``. The leases it kept this
        process's (a drain's, a hold's, a takeover's) last from then (``lease_left``); those
        another process has taken are forgotten, and so is what is older than a lease. The
        drains here whose lease another process has taken since (this process was frozen or cut
        off past its expiry) stop: their writes are refused already, and this ends what else
        they do, the shell commands their tools run, without waiting for their next write. (A
        renewal cannot bring such a lease back: it renews only leases still this process's.)"""
        assert self._target is not None
        current = {row.session_id: (row.owner, row.token) for row in held}
        stale = began - self.lease_ms / 1000
        for session_id, extended in list(self._extended_at.items()):
            owner = current.get(session_id, (None, None))[0]
            if owner == self.origin:
                self._extended_at[session_id] = max(extended, began)
            elif owner is not None or extended < stale:
                del self._extended_at[session_id]
        for session_id, lease in draining.items():
            if current.get(session_id) != (self.origin, lease.token):
                self._target.lost(session_id, lease)

    async def _departed(self, held: list[leases.Held]) -> set[str]:
        """The owners of live leases in ``held`` that are gone: not heard from for ``SILENT_S``
        and holding no presence in the database (it ended with their connections: a kill -9, a
        crash). Their leases are expired at once, so the next claim takes their sessions over
        without waiting out the expiry. A machine that vanished without closing its connections
        keeps its presence until PostgreSQL notices: its leases expire as before.

        Judged only once this process's own presence has stood for ``SETTLED_S``: when the
        database comes back from an outage, every process is silent and absent until it has
        reconnected. One judged gone that was not (paused, cut off) loses nothing: its writes
        check the lease, and its next renewal keeps whatever was not claimed yet."""
        since = self.db.present_since
        if since is None or time.monotonic() - since < SETTLED_S:
            return set()
        heard, now = self.infra.log.topology.heard_within(SILENT_S), now_ms()
        silent = {row.owner for row in held if row.expires_at >= now and row.owner not in heard}
        silent -= {NOBODY, self.origin}
        if not silent:
            return set()
        gone = await self.db.absent(sorted(silent))
        for owner in gone:
            log.warning("process %s is gone (silent and disconnected): its sessions are taken over", owner)
            await leases.renew(self.db, owner, now - 1)
        return gone

    # -- control messages --------------------------------------------------------------------

    async def send(self, to: str, op: str, session_id: str, **extra: Any) -> None:
        """``op`` to the process ``to`` (or ``EVERYONE`` else)."""
        await self.db.notify(CONTROL, self._message(to, op, session_id, **extra))

    def _message(self, to: str, op: str, session_id: str, **extra: Any) -> str:
        return dumps({"to": to, "from": self.origin, "op": op, "s": session_id, **extra})

    async def tell(self, session_id: str, op: str, **extra: Any) -> bool:
        owner = await self._owner_elsewhere(session_id)
        if owner is None:
            return False
        await self.send(owner, op, session_id, **extra)
        return True

    async def _owner_elsewhere(self, session_id: str) -> str | None:
        owner = await leases.live_owner(self.db, session_id, now_ms())
        return None if owner == self.origin else owner

    async def forward(self, session_id: str, op: str, **extra: Any) -> bool:
        """Ask the process draining ``session_id`` to ``op`` it and wait (up to a lease time) until
        that drain has ended; False when no other process drains it."""
        owner = await self._owner_elsewhere(session_id)
        if owner is None:
            return False
        # Its announcements (relayed here) say when it has stopped: the lease is given up before
        # idle is announced. A slow re-check covers an announcement that never comes.
        announced = self.infra.bus.subscribe(lambda e: e.type in STATUS_EVENTS, session=session_id)
        try:
            await self.send(owner, op, session_id, **extra)
            deadline = time.monotonic() + self.lease_ms / 1000
            while time.monotonic() < deadline and await leases.live_owner(self.db, session_id, now_ms()) == owner:
                with suppress(Overflowed):
                    await announced.next(min(FORWARD_RECHECK_S, max(deadline - time.monotonic(), 0.0)))
        finally:
            announced.close()
        return True

    def _received(self, payload: str) -> None:
        message = loads(payload)
        to = message.get("to")
        addressed = to == self.origin or (to == EVERYONE and message.get("from") != self.origin)
        if not addressed or self._target is None:
            return
        session_id, op = message["s"], message["op"]
        if op == "wake":
            self._target.wake(session_id)
            return
        if op == "place":  # a session whose directory the sender lacks: drain it if it is here
            if os.path.isdir(message.get("directory", "")):
                self._target.wake(session_id)
            else:
                self._spawn(self.send(message["from"], "lacks", session_id))
            return
        if op == "lacks":
            self._lacks(session_id, message["from"])
            return
        if op == "where":
            self._here_is(message)
            return
        if op == "here":
            self._heard_where(message)
            return
        if op in ("abort", "interrupt"):
            through = message.get("through") if op == "abort" else None
            work: Awaitable[Any] = self._target.interrupt(session_id, settle_through=through)
        elif op in self.handlers:
            work = self.handlers[op](message)
        else:
            log.warning("unknown control operation %r", op)
            return
        self._spawn(work)

    def _lacks(self, session_id: str, origin: str) -> None:
        """Process ``origin`` lacks the directory of a session this one is placing: once every
        process asked does, it is drained here at once."""
        placing = self._placing.get(session_id)
        if placing is None:
            return
        asked, lacking = placing
        lacking.add(origin)
        if asked <= lacking:
            del self._placing[session_id]
            self._homeless.add(session_id)
            self._wake_here(session_id)

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` beside the caller (a control operation), kept until it ends."""
        task = asyncio.ensure_future(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def await_idle(self, session_id: str) -> None:
        """Wait until no process holds the session and no admitted prompt is about to be claimed
        (prompts parked by an interrupt stay parked: after a quiet second they no longer count).
        While another process drains it, wait for that process's status announcements (relayed
        here) rather than asking the database every few milliseconds; a slow re-check covers one
        that never comes (its process died)."""
        assert self._target is not None
        quiet_since: float | None = None
        announced = self.infra.bus.subscribe(lambda e: e.type in STATUS_EVENTS, session=session_id)
        try:
            while True:
                if self._target.is_active(session_id):
                    await self._target.await_idle(session_id)
                    quiet_since = None
                elif await self.leased(session_id):
                    quiet_since = None
                    with suppress(Overflowed):
                        await announced.next(ELSEWHERE_RECHECK_S)
                    continue
                elif not await self.infra.queries.unsettled_inputs(session_id):
                    return
                else:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 1.0:
                        return
                await asyncio.sleep(0.05)
        finally:
            announced.close()

    # -- requests asked on other processes ---------------------------------------------------

    def serve_requests(self, observe: Callable[[Event], None], handlers: Mapping[str, Handler]) -> None:
        self.handlers.update(handlers)
        watched = self.infra.bus.subscribe(lambda e: e.type in FOLLOWED_REQUEST_EVENTS)
        self._following = asyncio.create_task(self._follow(watched, observe), name="cluster:permissions")

    @staticmethod
    async def _follow(watched: Subscription, observe: Callable[[Event], None]) -> None:
        try:
            while True:
                event = await watched.next(3600)
                if event is not None:
                    observe(event)
        finally:
            watched.close()


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for its end; a caller cancelled meanwhile is cancelled still
    (``gather``; ``suppress`` around an ``await`` would swallow the caller's cancellation)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
