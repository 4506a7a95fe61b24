"""The ``events`` table: the durable log, append-only. Written only by the event log
(``app/events/log.py``), which numbers the events (``cursor`` server-wide, ``seq`` per session)."""

from __future__ import annotations

from typing import NamedTuple

from app.store import sql
from app.store.database import Reader, Row, WriteScope

# A shared database numbers a transaction's events from its transaction id shifted left by this
# many bits (``opensession_write_head``, migration 0012).
CURSOR_BITS = 20


class Snapshot(NamedTuple):
    """What had committed when PostgreSQL took a snapshot (``pg_current_snapshot()``): every
    transaction below ``xmin``, and those below ``xmax`` not ``running`` then."""

    xmin: int
    xmax: int
    running: frozenset[int]

    def committed(self, cursor: int) -> bool:
        """Whether the transaction that wrote the event at ``cursor`` had committed."""
        xid = cursor >> CURSOR_BITS
        return xid < self.xmin or (xid < self.xmax and xid not in self.running)

    @property
    def ceiling(self) -> int:
        """The first cursor of a transaction that began after the snapshot: none from there on
        had committed."""
        return self.xmax << CURSOR_BITS


async def snapshot(reader: Reader) -> Snapshot:
    """What has committed by now (shared databases)."""
    xmin, xmax, running = str((await reader.fetch(sql.SNAPSHOT))[0][0]).split(":")
    return Snapshot(int(xmin), int(xmax), frozenset(int(xid) for xid in running.split(",") if xid))


class HeldLease(NamedTuple):
    """A session's drain lease as a write transaction read it under the session's hold."""

    owner: str
    token: int
    expires_at: int  # ms since the epoch


class WriteHead(NamedTuple):
    """Where a write transaction on a shared database continues from (``write_head``)."""

    # Its events' cursors follow this one (its transaction id, shifted), taken once it holds
    # ``session_id``; None without a session (a later hold takes it: ``hold_session``).
    first_cursor: int | None
    last_seq: int  # the held session's newest seq (-1 before its first event, or none held)
    lease: HeldLease | None  # the held session's lease (None: nobody holds it)
    session_info: str | None  # the held session's info as JSON text (None: no such session)
    revert_journal: str | None  # the held session's revert journal (None: no revert under way)


async def write_head(scope: WriteScope, session_id: str | None) -> WriteHead:
    """Where the transaction's cursors start, and for ``session_id`` its hold (kept to the
    commit), then its ``last_seq``, lease, info and revert journal, in one round trip
    (shared databases)."""
    first, seq, owner, token, info, journal, expires = (
        await scope.fetch(sql.WRITE_HEAD, {"session_id": session_id or ""})
    )[0]
    if first is not None:
        scope.transaction_id = int(first) >> CURSOR_BITS
    lease = None if owner is None else HeldLease(owner, int(token), int(expires))
    return WriteHead(None if first is None else int(first), -1 if seq is None else int(seq), lease, info, journal)


async def hold_session(scope: WriteScope, session_id: str) -> int:
    """The session's hold (to the commit), and its last seq then (shared databases). A
    transaction without an id yet takes it right after the hold (``scope.transaction_id``): a
    session's writers are numbered in the order they held it, so the log's cursor order (what
    every process publishes in) keeps each session's events in ``seq`` order."""
    if scope.transaction_id is not None:
        return int((await scope.fetch(sql.HOLD_SESSION, {"session_id": session_id}))[0][0])
    seq, first = (await scope.fetch(sql.HOLD_NUMBERED, {"session_id": session_id}))[0]
    scope.transaction_id = int(first) >> CURSOR_BITS
    return int(seq)


def append(
    scope: WriteScope,
    *,
    cursor: int,
    event_id: str,
    session_id: str | None,
    directory: str | None,
    seq: int | None,
    type: str,
    data: str,
    time: int,
) -> None:
    """Queue one event; appends are sent after the transaction's other writes (``WriteScope.append``)."""
    scope.append(
        sql.INSERT_EVENT,
        {
            "id": cursor,
            "event_id": event_id,
            "session_id": session_id,
            "directory": directory,
            "seq": seq,
            "type": type,
            "data": data,
            "time": time,
        },
    )


async def newest_cursor(reader: Reader) -> int:
    """The newest event's cursor (0 for an empty log)."""
    rows = await reader.fetch(sql.MAX_CURSOR)
    return int(rows[0][0]) if rows else 0


async def last_seq(reader: Reader, session_id: str) -> int:
    """The session's newest ``seq`` (-1 before its first event)."""
    rows = await reader.fetch(sql.MAX_SEQ, {"session_id": session_id})
    return int(rows[0][0]) if rows and rows[0][0] is not None else -1


async def of_session_after(reader: Reader, session_id: str, after: int, limit: int) -> list[Row]:
    """Up to ``limit`` of the session's events past ``seq`` ``after``, in order."""
    return await reader.fetch(sql.SESSION_EVENTS_AFTER, {"session_id": session_id, "after": after, "limit": limit})


async def since(
    reader: Reader, cursor: int, limit: int, directory: str | None = None, *, settled: bool = False
) -> list[Row]:
    """Up to ``limit`` events past ``cursor`` (of one directory), in order; ``settled``: only
    those below ``settled()`` (concurrent writers: one committed past a transaction still running
    could otherwise be read before that transaction's, lower, ones)."""
    params: dict[str, object] = {"cursor": cursor, "limit": limit}
    if directory is not None:
        params["directory"] = directory
    return await reader.fetch(sql.events_since(settled=settled, in_directory=directory is not None), params)


async def settled_up_to(reader: Reader, cursor: int, upto: int, limit: int, skip: list[int]) -> tuple[list[Row], int]:
    """Up to ``limit`` settled events past ``cursor`` and up to ``upto``, in order, but those of
    the transactions ``skip`` (their ids), and the settled horizon (``settled``) as the same read
    saw it (shared databases)."""
    params = {"cursor": cursor, "upto": upto, "limit": limit, "skip": skip}
    rows = await reader.fetch(sql.RELAY_CATCH_UP, params)
    found = sorted((row for row in rows if row[1] is not None), key=lambda row: int(row[0]))
    horizon = next(int(row[0]) for row in rows if row[1] is None)
    return found, horizon


async def settled(reader: Reader) -> int:
    """The cursor below which no running transaction can still add an event (shared databases)."""
    return int((await reader.fetch(sql.SETTLED))[0][0])


async def settled_cursor(reader: Reader) -> int:
    """The newest event's cursor below ``settled`` (0 for an empty log)."""
    return int((await reader.fetch(sql.SETTLED_CURSOR))[0][0])
