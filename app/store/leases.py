"""The ``leases`` table (shared databases): who drains each session, under which token, until
when. Owned by the cluster (``app/runtime/sessions/_cluster.py``); the event log reads a lease to
fence a drain's writes.

Invariant: a lease changes hands only through ``acquire`` (free, expired or already the caller's),
and each acquisition gets a new token, so a writer holding an old token can tell it lost the lease."""

from __future__ import annotations

from app.store import sql
from app.store.database import Database, Reader, WriteScope


def reserve(scope: WriteScope, session_id: str, owner: str, expires_at: int) -> None:
    """The session's lease for ``owner`` if nobody has one; one already there is left as it is."""
    scope.execute(sql.LEASE_RESERVE, {"session_id": session_id, "owner": owner, "expires_at": expires_at})


async def acquire(scope: WriteScope, session_id: str, owner: str, expires_at: int, now: int) -> int | None:
    """Take the lease if it is free, expired (at ``now``) or already ``owner``'s: its new token,
    or None when another live owner holds it."""
    params = {"session_id": session_id, "owner": owner, "expires_at": expires_at, "now": now}
    taken = await scope.fetch(sql.LEASE_ACQUIRE, params)
    return int(taken[0][0]) if taken else None


async def holder(reader: Reader, session_id: str) -> tuple[str, int] | None:
    """``(owner, token)`` of the session's lease, live or expired, if it has one."""
    rows = await reader.fetch(sql.LEASE, {"session_id": session_id})
    return (rows[0][0], int(rows[0][1])) if rows else None


async def renew(db: Database, owner: str, expires_at: int) -> None:
    """Every lease of ``owner`` now expires at ``expires_at`` (0: at once, a clean shutdown). A
    statement of its own, never queued behind the writer's transactions: it changes only the
    expiry, and ``acquire`` re-checks that under the row lock."""
    await db.execute_alone(sql.LEASE_RENEW, {"owner": owner, "expires_at": expires_at})


def release(scope: WriteScope, session_id: str, owner: str, token: int) -> None:
    """Drop the lease if it is still ``owner``'s under ``token``."""
    scope.execute(sql.LEASE_RELEASE, {"session_id": session_id, "owner": owner, "token": token})


async def live(reader: Reader, now: int) -> dict[str, str]:
    """Session id -> owner of every lease not expired at ``now``."""
    return {row[0]: row[1] for row in await reader.fetch(sql.LIVE_LEASES, {"now": now})}


async def every(reader: Reader) -> list[tuple[str, str, int]]:
    """``(session_id, owner, expires_at)`` of every lease, live or expired."""
    return [(row[0], row[1], int(row[2])) for row in await reader.fetch(sql.ALL_LEASES)]
