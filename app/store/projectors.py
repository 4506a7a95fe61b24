"""Projectors: each durable event type updates the query tables, inside the transaction that
appends the event. Nothing else writes ``sessions``, ``messages`` or ``parts``, so the tables can
always be rebuilt from the log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import Table, delete, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jsonutil import dumps
from app.store.schema import inputs, messages, parts, sessions

Projector = Callable[[AsyncConnection, dict[str, Any]], Awaitable[None]]


async def upsert(conn: AsyncConnection, table: Table, values: dict[str, Any]) -> None:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(**values)
    key = [column.name for column in table.primary_key.columns]
    changes = {name: statement.excluded[name] for name in values if name not in key}
    await conn.execute(statement.on_conflict_do_update(index_elements=key, set_=changes))


def _session_row(info: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": info["id"],
        "directory": info["directory"],
        "parent_id": info.get("parentID"),
        "title": info["title"],
        "time_created": info["time"]["created"],
        "time_updated": info["time"]["updated"],
        "info": dumps(info),
    }


async def _session_upserted(conn: AsyncConnection, props: dict[str, Any]) -> None:
    await upsert(conn, sessions, _session_row(props["info"]))


async def _session_deleted(conn: AsyncConnection, props: dict[str, Any]) -> None:
    session_id = props["sessionID"]
    for table in (parts, messages, inputs):
        await conn.execute(delete(table).where(table.c.session_id == session_id))
    await conn.execute(delete(sessions).where(sessions.c.id == session_id))


async def _message_updated(conn: AsyncConnection, props: dict[str, Any]) -> None:
    info = props["info"]
    await upsert(
        conn,
        messages,
        {
            "id": info["id"],
            "session_id": info["sessionID"],
            "role": info["role"],
            "time_created": info["time"]["created"],
            "info": dumps(info),
        },
    )


async def _message_removed(conn: AsyncConnection, props: dict[str, Any]) -> None:
    message_id = props["messageID"]
    await conn.execute(delete(parts).where(parts.c.message_id == message_id))
    await conn.execute(delete(messages).where(messages.c.id == message_id))


async def _part_updated(conn: AsyncConnection, props: dict[str, Any]) -> None:
    part = props["part"]
    await upsert(
        conn,
        parts,
        {"id": part["id"], "message_id": part["messageID"], "session_id": part["sessionID"], "data": dumps(part)},
    )


async def _part_removed(conn: AsyncConnection, props: dict[str, Any]) -> None:
    await conn.execute(delete(parts).where(parts.c.id == props["partID"]))


PROJECTORS: dict[str, Projector] = {
    "session.created": _session_upserted,
    "session.updated": _session_upserted,
    "session.deleted": _session_deleted,
    "message.updated": _message_updated,
    "message.removed": _message_removed,
    "message.part.updated": _part_updated,
    "message.part.removed": _part_removed,
}


async def project(conn: AsyncConnection, event_type: str, props: dict[str, Any]) -> None:
    projector = PROJECTORS.get(event_type)
    if projector is not None:
        await projector(conn, props)


async def touch_input(conn: AsyncConnection, input_id: str, **values: Any) -> None:
    """Admission-queue bookkeeping (promotion, completion) rides in the same transaction as the
    events that caused it."""
    await conn.execute(update(inputs).where(inputs.c.id == input_id).values(**values))
