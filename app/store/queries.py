"""Read side: every query the runtime and the API need, each one an indexed lookup or range
scan whose cost depends on the page asked for, not on how long a session is."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, select

from app.jsonutil import loads
from app.store.database import Database
from app.store.schema import inputs, messages, parts, sessions

MessageWithParts = dict[str, Any]


class Queries:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def session(self, session_id: str) -> dict[str, Any] | None:
        async with self.db.read() as conn:
            info = await conn.scalar(select(sessions.c.info).where(sessions.c.id == session_id))
        return loads(info) if info is not None else None

    async def sessions(
        self,
        *,
        directory: str | None,
        roots: bool = False,
        start: int | None = None,
        search: str | None = None,
        limit: int | None = None,
        parent_id: str | None = None,
    ) -> list[dict[str, Any]]:
        query = select(sessions.c.info).order_by(sessions.c.time_updated.desc(), sessions.c.id)
        if directory is not None:
            query = query.where(sessions.c.directory == directory)
        if roots:
            query = query.where(sessions.c.parent_id.is_(None))
        if parent_id is not None:
            query = query.where(sessions.c.parent_id == parent_id)
        if start is not None:
            query = query.where(sessions.c.time_updated >= start)
        if search:
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            query = query.where(sessions.c.title.ilike(f"%{escaped}%", escape="\\"))
        if limit is not None:
            query = query.limit(limit)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).scalars().all()
        return [loads(info) for info in rows]

    async def messages(
        self, session_id: str, *, limit: int | None = None, before: str | None = None
    ) -> list[MessageWithParts]:
        """Messages oldest first; with ``limit`` the newest ``limit`` older than ``before``."""
        query = select(messages.c.id, messages.c.info).where(messages.c.session_id == session_id)
        if before is not None:
            query = query.where(messages.c.id < before)
        if limit is not None:
            query = query.order_by(messages.c.id.desc()).limit(limit)
        else:
            query = query.order_by(messages.c.id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
            if limit is not None:
                rows.reverse()
            if not rows:
                return []
            part_query = select(parts.c.message_id, parts.c.data).order_by(parts.c.message_id, parts.c.id)
            if limit is None and before is None:
                part_query = part_query.where(parts.c.session_id == session_id)
            else:
                part_query = part_query.where(
                    and_(parts.c.session_id == session_id, parts.c.message_id.between(rows[0].id, rows[-1].id))
                )
            part_rows = (await conn.execute(part_query)).all()
        by_message: dict[str, list[dict[str, Any]]] = {row.id: [] for row in rows}
        for row in part_rows:
            bucket = by_message.get(row.message_id)
            if bucket is not None:
                bucket.append(loads(row.data))
        return [{"info": loads(row.info), "parts": by_message[row.id]} for row in rows]

    async def message(self, session_id: str, message_id: str) -> MessageWithParts | None:
        async with self.db.read() as conn:
            info = await conn.scalar(
                select(messages.c.info).where(messages.c.id == message_id, messages.c.session_id == session_id)
            )
            if info is None:
                return None
            data = (
                (await conn.execute(select(parts.c.data).where(parts.c.message_id == message_id).order_by(parts.c.id)))
                .scalars()
                .all()
            )
        return {"info": loads(info), "parts": [loads(d) for d in data]}

    async def last_assistant(self, session_id: str, parent_id: str | None = None) -> MessageWithParts | None:
        """The newest assistant message of a session (answering ``parent_id`` when given)."""
        query = (
            select(messages.c.id, messages.c.info)
            .where(messages.c.session_id == session_id, messages.c.role == "assistant")
            .order_by(messages.c.id.desc())
            .limit(50 if parent_id else 1)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        for row in rows:
            if parent_id is None or loads(row.info).get("parentID") == parent_id:
                return await self.message(session_id, row.id)
        return None

    async def input(self, input_id: str) -> Any:
        async with self.db.read() as conn:
            return (await conn.execute(select(inputs).where(inputs.c.id == input_id))).first()

    async def next_input(self, session_id: str) -> Any:
        """The oldest admitted input whose turn has not settled."""
        query = (
            select(inputs)
            .where(inputs.c.session_id == session_id, inputs.c.completed.is_(False))
            .order_by(inputs.c.admitted_seq)
            .limit(1)
        )
        async with self.db.read() as conn:
            return (await conn.execute(query)).first()

    async def sessions_with_unsettled_inputs(self) -> list[str]:
        query = select(inputs.c.session_id).where(inputs.c.completed.is_(False)).distinct()
        async with self.db.read() as conn:
            return list((await conn.execute(query)).scalars().all())

    async def unsettled_user_ids(self, session_id: str) -> set[str]:
        query = select(inputs.c.id).where(
            inputs.c.session_id == session_id, inputs.c.completed.is_(False), inputs.c.promoted_seq.is_(None)
        )
        async with self.db.read() as conn:
            return set((await conn.execute(query)).scalars().all())
