"""One process or a cluster: what differs between them, behind one interface.

``Topology`` is chosen once, from the database, when the sessions domain is built
(``SessionsDomain.build``): SQLite serves one process (``LocalTopology``), PostgreSQL any number
of processes sharing it (``ClusterTopology``, in ``_cluster.py``). The other domains and the
Runtime are written once against it: drain leases and their fencing, reservations at
admission, busy sessions read from the database, takeovers, operations forwarded to the
process that drains a session, and whether rows read may be kept in memory.

Invariant: in one process every session's lease is this process's, granted without asking
(``claim_at_once``), so the coordinator announces busy in the same step as the wake; nothing
is forwarded, reserved or taken over.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from app.events.log import Transaction
from app.events.model import Event
from app.runtime.sessions._coordinator import Claims, Lease
from app.runtime.sessions._recovery import StepChanges
from app.store.events import HeldLease

K = TypeVar("K")
V = TypeVar("V")

# A control operation another process forwards here (a permission reply, a question's answer).
Handler = Callable[[dict[str, Any]], Awaitable[None]]
Takeover = Callable[[str], Awaitable[None]]  # finishes, in a session taken over, what a domain left


def _unfenced() -> None:
    """Nothing to end: one process, whose writes no other process can take a session from."""


class Controlled(Protocol):
    """What the topology acts on: this process's drain coordinator."""

    def wake(self, session_id: str) -> None: ...

    def is_active(self, session_id: str) -> bool: ...

    def is_held(self, session_id: str) -> bool: ...

    def under_lease(self) -> dict[str, Lease]: ...

    def lost(self, session_id: str, lease: Lease) -> None: ...

    async def await_idle(self, session_id: str) -> None: ...

    async def interrupt(self, session_id: str, reason: str = "abort", *, settle_through: int | None = None) -> bool: ...


class Memo(Generic[K, V]):
    """A cache of rows this process reads, emptied whenever they change (``clear``, here, and on
    every process through ``Topology.changed``). ``generation`` counts the clears: a read that one
    overtook is not kept (``put_read``). ``max_age``: how long an entry is trusted at all (None:
    for ever), where the word of a change made elsewhere could be lost."""

    def __init__(self, max_age: float | None = None) -> None:
        self._entries: dict[K, tuple[V, float]] = {}
        self._max_age = max_age
        self.generation = 0

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, read_at = entry
        if self._max_age is not None and time.monotonic() - read_at > self._max_age:
            del self._entries[key]
            return None
        return value

    def put_read(self, key: K, value: V, generation: int) -> None:
        """Keep ``value``, read since ``generation`` began, unless a clear came meanwhile."""
        if generation == self.generation:
            self._entries[key] = (value, time.monotonic())

    def clear(self) -> None:
        self._entries.clear()
        self.generation += 1


@dataclass(frozen=True, slots=True)
class Patience:
    """How a synchronous prompt waits for its input to settle: it gives up after ``rounds``
    checks in a row find nobody draining the session, each wait lasting at most ``seconds``
    (None: until its waiter is released)."""

    rounds: int
    seconds: float | None


class Topology(Claims, Protocol):
    """What the sessions domain, the other domains and the Runtime ask of the topology."""

    patience: Patience
    # Where step snapshots live: beside the project (in its git directory) or in this process's
    # data directory. In a cluster another process may revert a session this one drained, and
    # the project directory is what the processes share.
    snapshots_beside_project: bool

    async def start(self, target: Controlled, changes: StepChanges | None) -> None:
        """Join: act on ``target`` (renewals, takeovers, control messages)."""
        ...

    async def stop(self) -> None: ...

    async def hand_off(self, shutdown: Callable[[], Awaitable[None]]) -> None:
        """This process is about to stop: stop taking sessions, end its drains (``shutdown``) and
        give what they held to the other processes at once (not after the lease expires)."""
        ...

    async def leased_elsewhere(self) -> set[str]:
        """Sessions another process holds a lease on, live or lapsed: start-up recovery leaves
        them to that process, or to the takeover that claims the lease."""
        ...

    def drains_under(self, lease: HeldLease | None) -> bool:
        """Whether a drain may be writing under ``lease`` (a session's, read under its hold):
        start-up recovery then closes nothing there (a process may claim a session between the
        read of ``leased_elsewhere`` and the closing)."""
        ...

    async def leased(self, session_id: str) -> bool:
        """Whether any process holds a live lease on the session (drains it, or is about to)."""
        ...

    async def reserved(self, held: Callable[[str], bool]) -> set[str]:
        """Sessions busy by their lease alone, beyond this process's statuses (its own holds,
        ``held``, are no work)."""
        ...

    def reserve(self, tx: Transaction, session_id: str, directory: str) -> bool:
        """In an admission's transaction: make the session (in ``directory``) busy for every
        process from its commit. Returns whether this process is to wake the session's drain;
        False when another live process drains it already (its drain answers the prompt: it reads
        the inputs admitted before it gives the lease up), or is to (its machine has the
        directory, this one's lacks)."""
        ...

    def on_takeover(self, finish: Takeover) -> None:
        """Have ``finish`` run in every session taken over from a dead process, after its turn."""
        ...

    async def where(self, directory: str) -> str | None:
        """The URL of another live process whose machine has ``directory`` (None: none)."""
        ...

    def serve_requests(self, observe: Callable[[Event], None], handlers: Mapping[str, Handler]) -> None:
        """Follow the requests other processes ask (``observe`` gets their events) and answer the
        replies they forward here (``handlers``, by operation)."""
        ...

    async def tell(self, session_id: str, op: str, **extra: Any) -> bool:
        """Send ``op`` to the other process that drains the session; False when none does."""
        ...

    async def forward(self, session_id: str, op: str, **extra: Any) -> bool:
        """``tell``, then wait (up to a lease time) until that process's drain has ended."""
        ...

    async def await_idle(self, session_id: str) -> None:
        """Once this process's drain has ended: return once no other process drains the session
        and no admitted prompt is about to be claimed."""
        ...

    def memo(self, name: str) -> Memo[Any, Any]:
        """This process's cache ``name`` of rows it reads; where other processes write them too,
        they empty it when they do (``changed``)."""
        ...

    async def changed(self, name: str) -> None:
        """What cache ``name`` holds was changed here (and its ``clear`` is due once committed):
        tell the other processes to empty theirs. Never raises: a word that cannot be sent is as
        good as lost (their copies age out)."""
        ...

    async def leases_held(self, draining: int) -> int:
        """The drain leases this process holds (``draining``: its drains now), for the metrics."""
        ...


OWN = Lease(token=0, seq=-1)  # one process's lease on every session: nobody else can claim it


class LocalTopology:
    """One process serves the database: every session is its own."""

    patience = Patience(rounds=1, seconds=None)  # a drain of this process would be answering it
    snapshots_beside_project = False  # where OpenCode keeps them: the data directory

    release_sees_admissions = False  # releasing is a no-op: a wake during a drain makes a pass

    def claim_at_once(self, session_id: str) -> Lease | None:
        return OWN

    async def claim(self, session_id: str) -> Lease | None:
        return OWN

    def fence(self, session_id: str, lease: Lease) -> Callable[[], None]:
        return _unfenced

    def lease_left(self, session_id: str) -> float:
        return math.inf  # nobody can take it over

    async def release(self, session_id: str, lease: Lease, *, unless_admitted_after: int | None = None) -> bool:
        return True

    async def close_open(self, session_id: str) -> None:
        return None  # a drain of this process closes what it left open itself

    async def start(self, target: Controlled, changes: StepChanges | None) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def hand_off(self, shutdown: Callable[[], Awaitable[None]]) -> None:
        return None  # nobody to hand to: the drains end with the lifespan, recovered at next start

    async def leased_elsewhere(self) -> set[str]:
        return set()

    def drains_under(self, lease: HeldLease | None) -> bool:
        return False  # no lease but its own

    async def leased(self, session_id: str) -> bool:
        return False

    async def reserved(self, held: Callable[[str], bool]) -> set[str]:
        return set()

    def reserve(self, tx: Transaction, session_id: str, directory: str) -> bool:
        return True

    async def where(self, directory: str) -> str | None:
        return None

    def on_takeover(self, finish: Takeover) -> None:
        return None

    def serve_requests(self, observe: Callable[[Event], None], handlers: Mapping[str, Handler]) -> None:
        return None

    async def tell(self, session_id: str, op: str, **extra: Any) -> bool:
        return False

    async def forward(self, session_id: str, op: str, **extra: Any) -> bool:
        return False

    async def await_idle(self, session_id: str) -> None:
        return None

    def memo(self, name: str) -> Memo[Any, Any]:
        return Memo()

    async def changed(self, name: str) -> None:
        return None  # no other process keeps one

    async def leases_held(self, draining: int) -> int:
        return draining  # each drain is granted its lease at once
