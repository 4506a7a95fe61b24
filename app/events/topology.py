"""How the event log sequences and fans out its writes, by topology (one backend per transport):

- ``LocalLogTopology``: this process is the database's only writer (SQLite), one transaction at a
  time. Each session's last seq is cached (as the writer sees it and as readers see it), and a
  transaction's events go to the bus once they are durable.
- ``ClusterLogTopology``: several processes share the database (PostgreSQL), each with several
  write transactions at once, and nothing serializes them all. Nothing is cached:
  - a transaction writing a session's events first takes the session's hold (an advisory lock to
    its commit) and reads its last seq under it, so a session's seq is gap-free in commit order;
  - a transaction's cursors follow its transaction id (``app.events.log``), and readers read only
    the settled part of the log (below the oldest transaction still running), so a cursor once
    read is never followed by a lower one committing;
  - a drain's transactions check the lease they drain under (``FENCE``), under the hold;
  - the ``ClusterRelay`` publishes every process's events on every process's bus in cursor order.

Why transaction ids rather than a counter under a lock: the old cluster-wide writer lock was held
for a whole transaction, round trips included, so a second process added no throughput. Ordering
by transaction id needs no lock at all; the price is that events reach readers once every older
transaction has ended (a long one, an import, delays the live stream for its duration).

``log_topology`` chooses once, from the database, when the log is built.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from app.events.bus import EventBus
from app.events.model import Event
from app.events.relay import ClusterRelay, Since
from app.store import events as stored_events
from app.store.database import Database, DatabaseUnavailable, WriteScope
from app.store.events import HeldLease
from app.store.events import Snapshot as Snapshot  # what ``committed_now`` answers, for the streams

SNAPSHOT_WAIT_S = 1.0  # the longest a stream's start waits to learn what has committed

# The drain lease a task writes under, on a shared database: ``(session_id, owner, token)``. Set by
# the coordinator for the task that drains a session (and inherited by tasks it starts); every
# write transaction of that task checks the lease is still its own, inside the transaction.
FENCE: ContextVar[tuple[str, str, int] | None] = ContextVar("opensession_fence", default=None)


@dataclass(frozen=True)
class Opened:
    """The cursor the transaction's events follow, the next seq of the session it holds, and that
    session's info (JSON text; None: no such session), revert journal (None: none) and drain
    lease (None: nobody's) as read under the hold."""

    cursor: int | None  # None: no session held yet (its first hold numbers it)
    next_seq: dict[str, int]
    infos: dict[str, str | None]
    journals: dict[str, str | None]
    leases: dict[str, HeldLease | None]


class LeaseLost(Exception):
    """Another process took over the session this task was draining: it must not write again."""


class LogTopology(Protocol):
    """What the log leaves to its topology: where sequence numbers continue from, and how a
    committed transaction's events (and ephemeral ones) reach the buses."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    concurrent: bool
    """Whether other transactions write the log at the same time as this one: then a session's
    writers hold it (``session_seq``) before they read it to change it, and readers read only the
    settled log (``settled_since``)."""

    async def session_seq(self, scope: WriteScope, session_id: str) -> int:
        """The session's last seq, for a transaction about to write its events; when
        ``concurrent``, read under the session's hold, kept to the commit."""
        ...

    def committed_seq(self, session_id: str) -> int | None:
        """The session's last durable seq as this process knows it; None: read it from the log."""
        ...

    def held(self, hold: str | None) -> str | None:
        """The session a transaction about to begin will hold from its start (the one the calling
        task drains, or ``hold``), where transactions run concurrently; None elsewhere."""
        ...

    async def opened(self, scope: WriteScope, hold: str | None) -> Opened | None:
        """At the start of a write transaction: where its cursors start, and the next seq of the
        session it drains or ``hold``s, when other transactions may have advanced them (None:
        this process's counts are current). Raises ``LeaseLost``."""
        ...

    def committing(self, scope: WriteScope, events: list[Event], next_seq: dict[str, int]) -> None:
        """At the end of a write transaction (inside it): arrange for ``events`` to be published
        once durable; ``next_seq`` is each written session's next seq."""
        ...

    async def committed_now(self) -> Snapshot | None:
        """What has committed by now and may not have reached this process's bus yet (None:
        nothing can be on its way). A stream opened now leaves those events out: the requests
        that wrote them may have been answered, and a client that opens a stream after an
        answer expects only what happens next."""
        ...

    def publish(self, event: Event) -> None:
        """Publish an ephemeral event now, outside any transaction."""
        ...

    def peers(self) -> frozenset[str]:
        """The other processes on the database heard from lately (none: this one is alone)."""
        ...

    def heard_within(self, seconds: float) -> frozenset[str]:
        """The other processes heard from in the last ``seconds`` (each says it is there every
        second)."""
        ...


class LocalLogTopology:
    def __init__(self, db: Database, bus: EventBus) -> None:
        self.bus = bus
        # Each session's last seq as the writer sees it, and as readers see it (durable).
        self._last_seq: dict[str, int] = {}
        self._committed_seq: dict[str, int] = {}
        db.on_lost_writes(self._last_seq.clear)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    concurrent = False

    async def session_seq(self, scope: WriteScope, session_id: str) -> int:
        last = self._last_seq.get(session_id)
        return await stored_events.last_seq(scope, session_id) if last is None else last

    def committed_seq(self, session_id: str) -> int | None:
        return self._committed_seq.get(session_id)

    def held(self, hold: str | None) -> str | None:
        return None  # one transaction at a time already

    async def opened(self, scope: WriteScope, hold: str | None) -> Opened | None:
        return None

    def committing(self, scope: WriteScope, events: list[Event], next_seq: dict[str, int]) -> None:
        def visible() -> None:  # the next transaction continues the sessions' sequences
            for session_id, seq in next_seq.items():
                self._last_seq[session_id] = seq - 1

        def durable() -> None:
            for session_id, seq in next_seq.items():
                self._committed_seq[session_id] = seq - 1
            self.bus.publish_many(events)

        scope.after_commit(visible)
        scope.when_durable(durable)

    async def committed_now(self) -> Snapshot | None:
        return None  # a commit is published as soon as it is durable

    def publish(self, event: Event) -> None:
        self.bus.publish(event)

    def peers(self) -> frozenset[str]:
        return frozenset()

    def heard_within(self, seconds: float) -> frozenset[str]:
        return frozenset()


class ClusterLogTopology:
    concurrent = True

    def __init__(self, db: Database, bus: EventBus, origin: str, since: Since) -> None:
        self.origin = origin
        self._db = db
        self._bus = bus
        self._relay = ClusterRelay(db, bus, origin, since)

    async def start(self) -> None:
        self._bus.cursor = await stored_events.settled_cursor(self._db)  # below: all published
        self._db.present_as(self.origin)  # held by the connection the relay listens on
        await self._relay.start()

    async def stop(self) -> None:
        await self._relay.stop()

    async def session_seq(self, scope: WriteScope, session_id: str) -> int:
        return await stored_events.hold_session(scope, session_id)

    def committed_seq(self, session_id: str) -> int | None:
        return None

    def held(self, hold: str | None) -> str | None:
        fence = FENCE.get()
        return fence[0] if fence is not None else hold

    async def opened(self, scope: WriteScope, hold: str | None) -> Opened:
        fence = FENCE.get()
        held = self.held(hold)
        head = await stored_events.write_head(scope, held)
        if fence is not None and (head.lease is None or head.lease[:2] != fence[1:]):
            raise LeaseLost(fence[0])
        if held is None:
            return Opened(head.first_cursor, {}, {}, {}, {})
        return Opened(
            head.first_cursor,
            {held: head.last_seq + 1},
            {held: head.session_info},
            {held: head.revert_journal},
            {held: head.lease},
        )

    def committing(self, scope: WriteScope, events: list[Event], next_seq: dict[str, int]) -> None:
        # The relay tells the other processes once the commit is durable: a NOTIFY inside the
        # transaction would make PostgreSQL serialize it with every other notifying commit.
        scope.when_durable(lambda: self._relay.committed(events))

    async def committed_now(self) -> Snapshot | None:
        # Any process's commit, its own too, reaches the bus once every older transaction has
        # ended. Without the database (or with it too slow to answer) the stream opens all the
        # same, and may carry some.
        try:
            async with asyncio.timeout(SNAPSHOT_WAIT_S):
                return await stored_events.snapshot(self._db)
        except (DatabaseUnavailable, TimeoutError):
            return None

    def publish(self, event: Event) -> None:
        self._relay.published(event)

    def peers(self) -> frozenset[str]:
        return self._relay.peers

    def heard_within(self, seconds: float) -> frozenset[str]:
        return self._relay.heard_within(seconds)


def log_topology(db: Database, bus: EventBus, origin: str, since: Since) -> LogTopology:
    """The log's topology, from the database: one that other processes may write to is a cluster."""
    return ClusterLogTopology(db, bus, origin, since) if db.shared else LocalLogTopology(db, bus)
