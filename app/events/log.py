"""The durable event log: append (with projection) in one transaction, fan out after commit,
replay by cursor.

Sequence numbers are allocated inside the write transaction: the per-session ``seq`` continues
from the last committed one, and a rolled-back transaction gives its session's numbers back, so
``seq`` stays gap-free per session. The whole-server ``cursor`` only ever grows in the order
readers see events. Where both continue from, and how committed events reach the buses, is the
log's topology (``app.events.topology``):
- on SQLite this process is the only writer, one transaction at a time: its cache and its cursor
  counter are the truth;
- on a shared database (PostgreSQL) many transactions write at once, on every process: a
  transaction's cursors are its transaction id times ``CURSORS_PER_TRANSACTION`` plus the
  event's place in it, and readers read only below the oldest transaction still running, so no
  event ever appears below a cursor a reader has passed. A session's seq is read under its hold.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.bus import EventBus
from app.events.model import Event
from app.events.topology import log_topology
from app.jsonutil import dumps
from app.store import events
from app.store.database import Database, Row, WriteScope
from app.store.events import HeldLease
from app.store.projectors import Projection, project
from app.wire import Session

# A durable event given as its type, its payload as JSON text and its projection rows (built by
# the caller from the same text).
EncodedEvent = tuple[str, str, list[Projection]]

# On a shared database, how many events one transaction may record (its cursors are its
# transaction id times this, plus one per event).
CURSORS_PER_TRANSACTION = 1 << events.CURSOR_BITS


class Unwanted(Exception):
    """A transaction found, once its turn came, that it has nothing to write any more
    (``EventLog.transaction(wanted=)``); nothing of it reached the database."""


class TooManyEvents(RuntimeError):
    """A transaction recorded more events than its cursors can number (``CURSORS_PER_TRANSACTION``)."""


class Transaction:
    """A write transaction that records events. ``emit`` appends a durable event and queues its
    projection; ``publish`` queues an ephemeral event. Both reach the bus only after commit, in
    the order they were added."""

    def __init__(self, scope: WriteScope, log: EventLog) -> None:
        self.scope = scope
        self._log = log
        self.events: list[Event] = []
        self.next_seq: dict[str, int] = {}
        # Set on a shared database: the cursor this transaction's events follow (``opened``).
        self.first_cursor: int | None = None
        self._numbered = 0
        # Session infos as they stand in this transaction (read under its hold, or changed in
        # it), by id, for read-your-writes before commit.
        self.overlay: dict[str, Session] = {}
        # Session infos the transaction's start read under the hold (JSON text; None: no such
        # session), not decoded until asked for, and their revert journals (None: none).
        self.held_infos: dict[str, str | None] = {}
        self.held_journals: dict[str, str | None] = {}
        # The drain leases of the sessions it holds, as read with the hold (shared databases only).
        self.held_leases: dict[str, HeldLease | None] = {}

    async def hold(self, session_id: str) -> None:
        """Before reading a session to change it: where other transactions write it at the same
        time, wait for theirs to end and keep them out until this one does (free otherwise)."""
        if self._log.topology.concurrent:
            await self._continue_seq(session_id)

    async def _continue_seq(self, session_id: str) -> None:
        """Where the session's seq continues in this transaction (read once: held, when concurrent)."""
        if session_id not in self.next_seq:
            self.next_seq[session_id] = await self._log.topology.session_seq(self.scope, session_id) + 1

    async def _allocate_seq(self, session_id: str) -> int:
        await self._continue_seq(session_id)
        seq = self.next_seq[session_id]
        self.next_seq[session_id] = seq + 1
        return seq

    def _allocate_cursor(self) -> int:
        if not self._log.topology.concurrent:
            return self._log.allocate_cursor()
        if self.first_cursor is None:  # numbered from the id its first hold took (``hold_session``)
            assert self.scope.transaction_id is not None, "a durable event is written under its session's hold"
            self.first_cursor = self.scope.transaction_id << events.CURSOR_BITS
        self._numbered += 1
        if self._numbered >= CURSORS_PER_TRANSACTION:
            raise TooManyEvents(f"one transaction may record at most {CURSORS_PER_TRANSACTION - 1} events")
        return self.first_cursor + self._numbered

    async def emit(
        self, event_type: str, properties: dict[str, Any], *, session_id: str, directory: str | None
    ) -> Event:
        event = Event(event_type, properties, session_id, directory, durable=True)
        project(self.scope, event_type, properties, await self._sequence(event))
        return self._record(event, dumps(properties))

    async def emit_encoded_run(self, session_id: str, directory: str | None, encoded: list[EncodedEvent]) -> None:
        """``emit`` for a run of one session's events whose payloads are JSON text already (bulk
        copies): nothing is decoded or re-encoded, and their ids, sequence numbers and time are
        taken once for the run, which was most of an event's cost when thousands are copied.
        Projection params may contain ``seq``: it is filled with the event's sequence number."""
        await self._continue_seq(session_id)
        at = now_ms()
        for (event_type, data, rows), event_id in zip(encoded, ids.ascending("event", len(encoded)), strict=True):
            event = Event(event_type, None, session_id, directory, durable=True, id=event_id, time=at, raw=data)
            seq = event.seq = self.next_seq[session_id]
            self.next_seq[session_id] = seq + 1
            event.cursor = self._allocate_cursor()
            for statement, params in rows:
                self.scope.execute(statement, params | {"seq": seq} if "seq" in params else params)
            self._record(event, data)

    async def _sequence(self, event: Event) -> int:
        assert event.session_id is not None
        event.seq = await self._allocate_seq(event.session_id)
        event.cursor = self._allocate_cursor()
        return event.seq

    def _record(self, event: Event, data: str) -> Event:
        events.append(
            self.scope,
            cursor=event.cursor,
            event_id=event.id,
            session_id=event.session_id,
            directory=event.directory,
            seq=event.seq,
            type=event.type,
            data=data,
            time=event.time,
        )
        # Published as stored, not as the caller's objects may stand by then (a streamed part
        # goes on changing after its update was recorded).
        event.raw = data
        self.events.append(event)
        return event

    def publish(self, event: Event) -> None:
        """Queue an ephemeral event (``Event(...)``), published after commit in order."""
        self.events.append(event)


def _row_to_event(row: Row) -> Event:
    cursor, event_id, session_id, directory, seq, event_type, data, time = row
    return Event(
        event_type, None, session_id, directory, durable=True, seq=seq, cursor=cursor, id=event_id, time=time, raw=data
    )


class SessionTurns:
    """In this process, one write transaction per held session at a time, queued *before* it
    takes a writer connection (and after a drain's transaction has yielded to urgent ones, so an
    admission never waits behind one that is only being polite). Where transactions run
    concurrently (PostgreSQL), those holding one session otherwise each took a connection and
    then waited on the session's hold inside the database: a session's drain and its queued
    admissions could occupy every writer connection while one of them worked
    (``bench/cluster.py``). Other processes' transactions still wait on the hold in the
    database, which stays what orders them."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}  # users of each lock, waiting or holding it

    @asynccontextmanager
    async def turn(self, session_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._waiting[session_id] = self._waiting.get(session_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._waiting[session_id] -= 1
            if not self._waiting[session_id]:
                del self._waiting[session_id], self._locks[session_id]


class EventLog:
    """The topology (chosen from the database) decides what is cached and how events fan out:
    on a shared database every process sees every event in one order."""

    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
        self.bus = bus
        self._cursor = 0
        # This server instance, as other processes on a shared database know it (leases, relay).
        self.origin = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.topology = log_topology(db, bus, self.origin, self._settled_up_to)
        self._turns = SessionTurns()

    async def start(self) -> None:
        self._cursor = await events.newest_cursor(self.db)
        self.bus.cursor = self._cursor
        await self.topology.start()

    async def stop(self) -> None:
        await self.topology.stop()

    def allocate_cursor(self) -> int:
        self._cursor += 1
        return self._cursor

    async def committed_seq(self, session_id: str) -> int:
        """The session's last committed ``seq`` (-1 before its first event)."""
        last = self.topology.committed_seq(session_id)
        if last is None:
            last = await events.last_seq(self.db, session_id)
        return last

    async def beyond(self, position: int, *, session_id: str | None = None) -> int | None:
        """The head of the log (the newest cursor, or with ``session_id`` that session's last
        seq) when ``position`` is past it, else None: a position this log never handed out (kept
        across a database reset, or from another server). What this process published answers
        most calls; the database is read to confirm, as it may be ahead of that (another
        process's commits, a commit not yet published here)."""
        if session_id is None:
            if position <= self.bus.cursor:
                return None
            head = await events.newest_cursor(self.db)
        else:
            known = self.topology.committed_seq(session_id)
            if known is not None and position <= known:
                return None
            head = await events.last_seq(self.db, session_id)
        return head if position > head else None

    @asynccontextmanager
    async def transaction(
        self,
        *,
        urgent: bool = False,
        at_once: bool = False,
        hold: str | None = None,
        wanted: Callable[[], bool] | None = None,
    ) -> AsyncIterator[Transaction]:
        """A write transaction recording events; ``urgent`` ones (a client waits on them: an
        admission, the part a streamed delta opens) go before drain loops' other writes, and an
        ``at_once`` one is durable without waiting for the others of its loop pass
        (``Database.write``). ``hold``: the session it changes, held from the start
        (``Transaction.hold``, without a round trip of its own). ``wanted`` is asked once the
        transaction's turn has come, before it reads or writes anything: False raises
        ``Unwanted`` (what it was to write was written meanwhile, by another transaction)."""
        held = self.topology.held(hold)
        queue = None if held is None else self._turns.turn(held)
        async with self.db.write(urgent=urgent, at_once=at_once, queue=queue) as scope:
            if wanted is not None and not wanted():
                raise Unwanted
            opened = await self.topology.opened(scope, hold)
            tx = Transaction(scope, self)
            if opened is not None:  # other transactions write too: continue from where they stand
                tx.first_cursor = opened.cursor
                tx.next_seq.update(opened.next_seq)
                tx.held_infos.update(opened.infos)
                tx.held_journals.update(opened.journals)
                tx.held_leases.update(opened.leases)
            yield tx
            self.topology.committing(scope, tx.events, tx.next_seq)

    def publish(self, event: Event) -> None:
        """Publish an ephemeral event (never stored) at once (to every process when shared)."""
        self.topology.publish(event)

    async def session_since(self, session_id: str, after: int, *, limit: int = 1000) -> list[Event]:
        """A session's durable events with ``seq > after``, in sequence order."""
        rows = await events.of_session_after(self.db, session_id, after, limit)
        return [_row_to_event(row) for row in rows]

    async def since(self, cursor: int, *, limit: int = 1000, directory: str | None = None) -> list[Event]:
        """Durable events after a whole-server cursor, oldest first."""
        rows = await events.since(self.db, cursor, limit, directory, settled=self.topology.concurrent)
        return [_row_to_event(row) for row in rows]

    async def _settled_up_to(self, cursor: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Event], int]:
        """The relay's read (shared databases): up to ``limit`` settled events after ``cursor`` up
        to ``upto``, oldest first (but those of the transactions ``skip``), and the settled horizon."""
        rows, horizon = await events.settled_up_to(self.db, cursor, upto, limit, skip)
        return [_row_to_event(row) for row in rows], horizon
