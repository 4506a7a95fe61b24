"""The ``request_keys`` table: what each keyed request made (the session of a create or fork; the
reply of a user shell command), so that the same request sent again (its ``Idempotency-Key``
unchanged) answers that instead of doing it twice. Rows go with their session when it is deleted
(``DELETE_SESSION_ROWS``).

Invariant: a key is looked up and recorded in one write transaction that holds the key
(``WriteScope.hold``), so two copies of one request in flight at once create one session."""

from __future__ import annotations

from dataclasses import dataclass

from app.store import sql
from app.store.database import Reader, WriteScope


@dataclass(frozen=True, slots=True)
class Keyed:
    session_id: str
    request: str  # what was asked: ``create <its arguments>``, ``fork <source> <message>``, ``shell ...``
    message_id: str | None = None  # the reply it made, for a shell command


async def find(reader: Reader, key: str) -> Keyed | None:
    """What ``key`` made, as committed (or as ``reader``'s transaction has it)."""
    rows = await reader.fetch(sql.REQUEST_KEY, {"key": key})
    return Keyed(*rows[0]) if rows else None


async def held(scope: WriteScope, key: str) -> Keyed | None:
    """What ``key`` made, once ``scope`` holds the key until its commit."""
    await scope.hold(f"request-key:{key}")
    return await find(scope, key)


def save(scope: WriteScope, key: str, made: Keyed) -> None:
    row = {"request_key": key, "session_id": made.session_id, "request": made.request, "message_id": made.message_id}
    scope.execute(sql.INSERT_REQUEST_KEY, row)
