"""The ``todos`` table: each session's todo list (the ``todowrite`` tool's), as JSON."""

from __future__ import annotations

from typing import Any

from app.jsonutil import dumps, loads
from app.store import sql
from app.store.database import Reader, WriteScope


async def of_session(reader: Reader, session_id: str) -> list[dict[str, Any]]:
    rows = await reader.fetch(sql.TODOS, {"session_id": session_id})
    return loads(rows[0][0]) if rows else []


def replace(scope: WriteScope, session_id: str, todos: list[dict[str, Any]]) -> None:
    scope.execute(sql.UPSERT_TODOS, {"session_id": session_id, "todos": dumps(todos)})
