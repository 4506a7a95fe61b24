"""Page cursors of both protocols: where the next page of a listing starts.

A cursor is opaque to clients: URL-safe base64 (unpadded) of a JSON object. Decoding checks
every field it reads, so a cursor that is not one of ours, or was altered, is an
``InvalidCursor`` (400), never a 500. The shapes are the ones clients already hold, so they stay:
legacy messages ``{id, time}``, V2 messages ``{id, order, direction}``, V2 sessions ``{order,
directory, search, anchor: {id, time, direction}}``."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from app.api.deps import MAX_INT
from app.jsonutil import dumpb, loads
from app.runtime.errors import InvalidCursor, InvalidInput

ORDERS = ("asc", "desc")


def encode(state: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(dumpb(state)).rstrip(b"=").decode()


def decode(cursor: str) -> dict[str, Any]:
    """The object a cursor encodes; ``InvalidCursor`` if it encodes none."""
    try:
        state = loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor from exc
    if not isinstance(state, dict):
        raise InvalidCursor
    return state


# -- legacy: /session/:id/message?limit=&before= ---------------------------------------------


def older_messages(message_id: str, created: int) -> str:
    """``x-next-cursor``: the page before the message ``message_id`` (created at ``created``)."""
    return encode({"id": message_id, "time": created})


def before_message(cursor: str) -> str:
    """The message id a ``before`` cursor points at."""
    message_id = decode(cursor).get("id")
    if not isinstance(message_id, str) or not message_id.startswith("msg_"):
        raise InvalidCursor
    return message_id


# -- V2: /api/session/:id/message -------------------------------------------------------------


def messages(message_id: str, order: str, direction: str) -> str:
    """The page after ``message_id`` in ``order`` (``direction``: ``next`` or ``previous``)."""
    return encode({"id": message_id, "order": order, "direction": direction})


def messages_after(cursor: str) -> tuple[str, str]:
    """The order a messages cursor pages in and the message id its page starts after."""
    state = decode(cursor)
    if not str(state.get("id", "")).startswith("msg_") or state.get("order") not in ORDERS:
        raise InvalidCursor
    return state["order"], state["id"]


# -- V2: /api/session -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionsPage:
    """Where a V2 session listing goes on: its order and filters, and the last session listed
    (its update time and id), after which the page starts."""

    order: str
    directory: str
    search: str | None
    anchor: tuple[int, str]


def sessions(page: SessionsPage) -> str:
    time, session_id = page.anchor
    anchor = {"id": session_id, "time": time, "direction": "next"}
    return encode({"order": page.order, "directory": page.directory, "search": page.search, "anchor": anchor})


def sessions_page(cursor: str, order: str | None) -> SessionsPage:
    """The listing a sessions cursor goes on with; an ``order`` other than its own is refused."""
    state = decode(cursor)
    if order is not None and order != state.get("order"):
        raise InvalidInput("Cursor cannot be combined with order", kind="Query")
    try:
        page = SessionsPage(
            state["order"],
            state["directory"],
            state.get("search"),
            (int(state["anchor"]["time"]), str(state["anchor"]["id"])),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidCursor from exc
    if (
        page.order not in ORDERS
        or not isinstance(page.directory, str)
        or not isinstance(page.search, str | None)
        or not 0 <= page.anchor[0] <= MAX_INT
    ):
        raise InvalidCursor
    return page
