"""The ``request_keys`` table: the session each keyed create or fork made, so that the same
request sent again (its ``Idempotency-Key`` unchanged) answers that session. Rows go with their
session when it is deleted (``DELETE_SESSION_ROWS``).

Invariant: a key is looked up and recorded in one write transaction that holds the key
(``WriteScope.hold``), so two copies of one request in flight at once create one session."""

from __future__ import annotations

from dataclasses import dataclass

from app.store import sql
from app.store.database import WriteScope


@dataclass(frozen=True, slots=True)
class Keyed:
    session_id: str
    request: str  # what was asked: ``create <its arguments>``, or ``fork <source> <message>``


async def held(scope: WriteScope, key: str) -> Keyed | None:
    """What ``key`` created, once ``scope`` holds the key until its commit."""
    await scope.hold(f"request-key:{key}")
    rows = await scope.fetch(sql.REQUEST_KEY, {"key": key})
    return Keyed(*rows[0]) if rows else None


def save(scope: WriteScope, key: str, session_id: str, request: str) -> None:
    scope.execute(sql.INSERT_REQUEST_KEY, {"request_key": key, "session_id": session_id, "request": request})
