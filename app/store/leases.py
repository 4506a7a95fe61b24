"""The ``leases`` table (shared databases): who drains each session, under which token, until
when. Owned by the cluster (``app/runtime/sessions/_cluster.py``); the event log reads a lease to
fence a drain's writes.

Invariant: a lease changes hands only through ``claim`` (free, expired or already the caller's),
and each reservation and acquisition gets a token never handed out before (one sequence for all,
migration 0021: a released lease's row is deleted, and counting per row began again at 1), so a
writer holding an old token can tell it lost the lease, even to its own process."""

from __future__ import annotations

from typing import NamedTuple

from app.store import sql
from app.store.database import Database, Reader, WriteScope


def reserve(scope: WriteScope, session_id: str, owner: str, expires_at: int) -> None:
    """The session's lease for ``owner`` if nobody has one; one already there is left as it is."""
    scope.execute(sql.LEASE_RESERVE, {"session_id": session_id, "owner": owner, "expires_at": expires_at})


class Claim(NamedTuple):
    """What a claim found and did (``claim``)."""

    last_seq: int  # the session's last seq under its hold (-1 before its first event)
    previous_owner: str | None  # who held the lease before, live or expired (None: nobody)
    token: int | None  # the new token; None: another live owner keeps the lease


async def claim(db: Database, session_id: str, owner: str, expires_at: int, now: int) -> Claim:
    """Take the lease if it is free, expired (at ``now``) or already ``owner``'s, under the
    session's hold (so after every writer still committing under the old lease), in a transaction
    of its own."""
    params = {"session_id": session_id, "owner": owner, "expires_at": expires_at, "now": now}
    last_seq, previous, token = (await db.execute_alone(sql.LEASE_CLAIM, params))[0]
    return Claim(int(last_seq), previous, None if token is None else int(token))


async def renew(db: Database, owner: str, expires_at: int) -> None:
    """Every lease of ``owner`` now expires at ``expires_at`` (now: a clean shutdown). A
    statement of its own, never queued behind the writer's transactions: it changes only the
    expiry, and ``acquire`` re-checks that under the row lock."""
    await db.execute_alone(sql.LEASE_RENEW, {"owner": owner, "expires_at": expires_at})


async def release(db: Database, session_id: str, owner: str, token: int, *, unless_admitted_after: int | None) -> bool:
    """Drop the lease if it is still ``owner``'s under ``token``, unless (with
    ``unless_admitted_after``, a seq) an input admitted after that seq waits: checked under the
    session's hold, which admissions take too, so none slips in between. Whether it was dropped."""
    params = {"session_id": session_id, "owner": owner, "token": token, "admitted_after": unless_admitted_after}
    return bool((await db.execute_alone(sql.LEASE_RELEASE, params))[0][0])


async def live(reader: Reader, now: int) -> dict[str, str]:
    """Session id -> owner of every lease not expired at ``now``."""
    return {row[0]: row[1] for row in await reader.fetch(sql.LIVE_LEASES, {"now": now})}


async def live_owner(reader: Reader, session_id: str, now: int) -> str | None:
    """Who holds the session's lease, if it has one not expired at ``now`` (a keyed read)."""
    rows = await reader.fetch(sql.LIVE_LEASE, {"session_id": session_id, "now": now})
    return rows[0][0] if rows else None


class Held(NamedTuple):
    """A lease as stored, live or expired."""

    session_id: str
    owner: str
    token: int
    expires_at: int


async def every(reader: Reader) -> list[Held]:
    """Every lease, live or expired."""
    return [Held(row[0], row[1], int(row[2]), int(row[3])) for row in await reader.fetch(sql.ALL_LEASES)]
