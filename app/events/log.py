"""The durable event log: append (with projection) in one transaction, fan out after commit,
replay by cursor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.events.bus import EventBus
from app.events.model import Event
from app.jsonutil import dumps, loads
from app.store.database import Database
from app.store.projectors import project
from app.store.schema import events


class Transaction:
    """A write transaction that records events. ``emit`` appends a durable event and runs its
    projector now; ``publish`` queues an ephemeral event. Both reach the bus only after commit,
    in the order they were added."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.events: list[Event] = []
        self._next_seq: dict[str, int] = {}

    async def _allocate_seq(self, session_id: str) -> int:
        seq = self._next_seq.get(session_id)
        if seq is None:
            latest = await self.conn.scalar(select(func.max(events.c.seq)).where(events.c.session_id == session_id))
            seq = 0 if latest is None else latest + 1
        self._next_seq[session_id] = seq + 1
        return seq

    async def emit(
        self, event_type: str, properties: dict[str, Any], *, session_id: str, directory: str | None
    ) -> Event:
        event = Event(event_type, properties, session_id, directory, durable=True)
        event.seq = await self._allocate_seq(session_id)
        await project(self.conn, event_type, properties)
        result = await self.conn.execute(
            insert(events)
            .values(
                event_id=event.id,
                session_id=session_id,
                directory=directory,
                seq=event.seq,
                type=event_type,
                data=dumps(properties),
                time=event.time,
            )
            .returning(events.c.id)
        )
        event.cursor = result.scalar_one()
        self.events.append(event)
        return event

    def publish(
        self,
        event_type: str,
        properties: dict[str, Any],
        *,
        session_id: str | None = None,
        directory: str | None = None,
    ) -> None:
        self.events.append(Event(event_type, properties, session_id, directory))


def _row_to_event(row: Any) -> Event:
    return Event(
        type=row.type,
        properties=loads(row.data),
        session_id=row.session_id,
        directory=row.directory,
        durable=True,
        seq=row.seq,
        cursor=row.id,
        id=row.event_id,
        time=row.time,
    )


class EventLog:
    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
        self.bus = bus

    async def start(self) -> None:
        async with self.db.read() as conn:
            self.bus.cursor = await conn.scalar(select(func.coalesce(func.max(events.c.id), 0))) or 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        async with self.db.write() as scope:
            tx = Transaction(scope.conn)
            yield tx
            scope.after_commit(lambda: self.bus.publish_many(tx.events))

    def publish(
        self,
        event_type: str,
        properties: dict[str, Any],
        *,
        session_id: str | None = None,
        directory: str | None = None,
    ) -> None:
        """Publish an ephemeral event (never stored)."""
        self.bus.publish(Event(event_type, properties, session_id, directory))

    async def since(self, cursor: int, *, limit: int = 1000, directory: str | None = None) -> list[Event]:
        """Durable events after a whole-server cursor, oldest first."""
        query = select(events).where(events.c.id > cursor).order_by(events.c.id).limit(limit)
        if directory is not None:
            query = query.where(events.c.directory == directory)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_row_to_event(row) for row in rows]
