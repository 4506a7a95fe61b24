"""Projectors: each durable event type updates the query tables, inside the transaction that
appends the event. Nothing else writes ``sessions``, ``messages`` or ``parts`` (apart from
streaming checkpoints of a part's text), so the tables can always be rebuilt from the log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.jsonutil import dumps
from app.store import sql
from app.store.database import WriteScope

# A projector gets the transaction, the event's properties and its per-session sequence number.
Projector = Callable[[WriteScope, dict[str, Any], int], None]


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
