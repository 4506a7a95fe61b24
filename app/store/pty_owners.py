"""The ``pty_owners`` table (shared databases): which live process owns each terminal and where
it can be reached. Owned by the terminals domain (``app/runtime/terminals/_placement.py``): each
process writes the rows of the terminals it serves (those it takes up from another included),
and removes them when it stops, but those of the terminals it leaves running for another to take
up; a row whose ``expires_at`` has passed belongs to a process that stopped renewing it (it
died) and is read as absent.

Invariant: only processes write ``url`` (their own advertised address), never a client, so a
process forwards only to addresses the cluster's own members registered."""

from __future__ import annotations

from dataclasses import dataclass

from app.store import sql
from app.store.database import Reader, WriteScope


@dataclass(frozen=True, slots=True)
class Owner:
    origin: str
    url: str


@dataclass(frozen=True, slots=True)
class Listed:
    pty_id: str
    owner: str
    info: str  # the pty's JSON, as its owner last recorded it


def save(scope: WriteScope, pty_id: str, directory: str, owner: Owner, info: str, expires_at: int) -> None:
    params = {
        "id": pty_id,
        "directory": directory,
        "owner": owner.origin,
        "url": owner.url,
        "info": info,
        "expires_at": expires_at,
    }
    scope.execute(sql.SAVE_PTY_OWNER, params)


def drop(scope: WriteScope, pty_id: str) -> None:
    scope.execute(sql.DELETE_PTY_OWNER, {"id": pty_id})


def drop_expired(scope: WriteScope, before: int) -> None:
    """The rows of processes that stopped renewing them before ``before`` (ms): dead ones."""
    scope.execute(sql.DELETE_EXPIRED_PTYS, {"before": before})


async def owner(reader: Reader, pty_id: str, now: int) -> Owner | None:
    """The live owner of ``pty_id`` at ``now``, if any."""
    rows = await reader.fetch(sql.PTY_OWNER, {"id": pty_id, "now": now})
    return Owner(rows[0][0], rows[0][1]) if rows else None


async def in_directory(reader: Reader, directory: str, now: int) -> list[Listed]:
    """The ptys of ``directory`` whose owner is live at ``now``, by id."""
    rows = await reader.fetch(sql.LIVE_PTYS_IN_DIRECTORY, {"directory": directory, "now": now})
    return [Listed(row[0], row[1], row[2]) for row in rows]
