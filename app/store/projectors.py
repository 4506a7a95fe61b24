"""Projectors: each durable event type updates the query tables, inside the transaction that
appends the event. Nothing else writes ``sessions``, ``messages`` or ``parts`` (apart from
streaming checkpoints of a part's text, ``checkpoint_part``), so the tables can always be rebuilt
from the log. An event whose payload is JSON text already (bulk copies) brings its projection
built from the same text (``message_projection``, ``part_projection``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.jsonutil import dumps
from app.store import sql
from app.store.database import Params, WriteScope
from app.store.statement import Statement

# A projector gets the transaction, the event's properties and its per-session sequence number.
Projector = Callable[[WriteScope, dict[str, Any], int], None]
# An encoded event's projection: a statement and its row (a ``seq`` in it is the event's, filled in
# by the log).
Projection = tuple[Statement, Params]


def session_row(info: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": info["id"],
        "directory": info["directory"],
        "parent_id": info.get("parentID"),
        "title": info["title"],
        "time_created": info["time"]["created"],
        "time_updated": info["time"]["updated"],
        "info": dumps(info),
    }


def part_row(part: dict[str, Any]) -> dict[str, Any]:
    return {"id": part["id"], "message_id": part["messageID"], "session_id": part["sessionID"], "data": dumps(part)}


def message_projection(message_id: str, session_id: str, role: str, time_created: int, info: str) -> Projection:
    """The row of a ``message.updated`` event whose ``info`` is JSON text."""
    row = {"id": message_id, "session_id": session_id, "role": role, "time_created": time_created, "info": info}
    return sql.UPSERT_MESSAGE, row | {"seq": 0}


def part_projection(part_id: str, message_id: str, session_id: str, data: str) -> Projection:
    """The row of a ``message.part.updated`` event whose part is JSON text."""
    return sql.UPSERT_PART, {"id": part_id, "message_id": message_id, "session_id": session_id, "data": data}


def checkpoint_part(scope: WriteScope, part: dict[str, Any]) -> None:
    """Store a streaming part's text so far, without an event: a crash keeps what was streamed
    (the part's own event, when it ends, projects the same row)."""
    scope.execute(sql.UPSERT_PART, part_row(part))


def _session_upserted(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    scope.execute(sql.UPSERT_SESSION, session_row(props["info"]))


def _session_deleted(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    session_id = props["sessionID"]
    for statement in sql.DELETE_SESSION_ROWS.values():
        scope.execute(statement, {"session_id": session_id})
    scope.execute(sql.DELETE_SESSION, {"id": session_id})


def _message_updated(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    info = props["info"]
    scope.execute(
        sql.UPSERT_MESSAGE,
        {
            "id": info["id"],
            "session_id": info["sessionID"],
            "role": info["role"],
            "time_created": info["time"]["created"],
            "info": dumps(info),
            "seq": seq,
        },
    )


def _message_removed(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    scope.execute(sql.DELETE_PARTS_OF_MESSAGE, {"message_id": props["messageID"]})
    scope.execute(sql.DELETE_MESSAGE, {"id": props["messageID"]})


def _part_updated(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    scope.execute(sql.UPSERT_PART, part_row(props["part"]))


def _part_removed(scope: WriteScope, props: dict[str, Any], seq: int) -> None:
    scope.execute(sql.DELETE_PART, {"id": props["partID"]})


PROJECTORS: dict[str, Projector] = {
    "session.created": _session_upserted,
    "session.updated": _session_upserted,
    "session.deleted": _session_deleted,
    "message.updated": _message_updated,
    "message.removed": _message_removed,
    "message.part.updated": _part_updated,
    "message.part.removed": _part_removed,
}


def project(scope: WriteScope, event_type: str, props: dict[str, Any], seq: int) -> None:
    projector = PROJECTORS.get(event_type)
    if projector is not None:
        projector(scope, props, seq)
