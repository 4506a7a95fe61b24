"""Every SQL statement the running server issues, built with SQLAlchemy Core from the table
definitions and compiled once for SQLite with named parameters (``:name``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ClauseElement,
    Table,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects import sqlite

from app.store.schema import (
    events,
    inputs,
    leases,
    messages,
    parts,
    saved_permissions,
    sessions,
    shares,
    snapshots,
    todos,
)

_DIALECT = sqlite.dialect(paramstyle="named")


class Statement(str):
    """A statement compiled for SQLite (the string itself, so it serves as SQL and as a key), which
    also gives the same statement for PostgreSQL: positional ``$n`` parameters and the names that
    fill them. The PostgreSQL text is compiled on first use, so start-up compiles only what the
    engine in use needs."""

    clause: ClauseElement
    postgres_clause: Callable[[], ClauseElement] | None
    _postgres: tuple[str, tuple[str, ...]] | None
    quick: bool  # a read that touches few rows through an index (the SQLite engine runs it inline)

    def for_postgres(self) -> tuple[str, tuple[str, ...]]:
        if self._postgres is None:
            from sqlalchemy.dialects.postgresql import asyncpg

            clause = self.postgres_clause() if self.postgres_clause is not None else self.clause
            compiled = clause.compile(dialect=asyncpg.dialect(paramstyle="numeric_dollar"))
            names: list[str] = getattr(compiled, "positiontup", None) or []
            self._postgres = (str(compiled), tuple(names))
        return self._postgres


def compile_sql(
    statement: ClauseElement, postgres: Callable[[], ClauseElement] | None = None, *, quick: bool = False
) -> Statement:
    """Compile for SQLite now; ``postgres`` builds the PostgreSQL form where the dialects' syntax
    differs (upserts), otherwise the same clause serves both. ``quick`` marks a read bounded by an
    index lookup: a row or a few, or the turn's own window (see ``SqliteDatabase.fetch``)."""
    # SQLite's compiler pairs a bound LIMIT with an (unneeded) bound OFFSET; drop it.
    text = str(statement.compile(dialect=_DIALECT)).replace(" OFFSET :param_1", "")
    anonymous = re.findall(r":(\w+_\d+)\b", text)
    if anonymous:  # a Python literal became a parameter nobody will supply
        raise ValueError(f"statement has anonymous parameters {anonymous}; use bindparam() or literal_column()")
    compiled = Statement(text)
    compiled.clause, compiled.postgres_clause, compiled._postgres = statement, postgres, None
    compiled.quick = quick
    return compiled


def _upsert_clause(insert: Insert, table: Table, keep: tuple[str, ...]) -> ClauseElement:
    columns = [c.name for c in table.columns]
    key = [c.name for c in table.primary_key.columns]
    statement = insert(table).values({name: bindparam(name) for name in columns})
    return statement.on_conflict_do_update(
        index_elements=key,
        set_={name: statement.excluded[name] for name in columns if name not in key and name not in keep},
    )


def _postgres_insert(table: Table) -> Any:
    from sqlalchemy.dialects import postgresql

    return postgresql.insert(table)


Insert = Callable[[Table], Any]  # a dialect's insert(), with its ON CONFLICT clauses


def compile_insert(build: Callable[[Insert], ClauseElement]) -> Statement:
    """A statement whose ON CONFLICT syntax each dialect builds with its own ``insert``."""
    return compile_sql(build(sqlite.insert), postgres=lambda: build(_postgres_insert))


def _upsert(table: Table, *, keep: tuple[str, ...] = ()) -> Statement:
    """Insert or update by primary key; columns in ``keep`` retain their first value."""
    return compile_insert(lambda insert: _upsert_clause(insert, table, keep))


# -- writes ---------------------------------------------------------------------------------------
UPSERT_SESSION = _upsert(sessions)
UPSERT_MESSAGE = _upsert(messages, keep=("seq",))
UPSERT_PART = _upsert(parts)
# Upserts into different tables commute (no foreign keys, triggers or reads between them): a write
# transaction may regroup a run of them by statement, each keeping its own row order.
COMMUTING = frozenset({UPSERT_SESSION, UPSERT_MESSAGE, UPSERT_PART})
INSERT_EVENT = compile_sql(events.insert().values({c.name: bindparam(c.name) for c in events.columns}))
INSERT_INPUT = compile_sql(inputs.insert().values({c.name: bindparam(c.name) for c in inputs.columns}))
DELETE_SESSION = compile_sql(delete(sessions).where(sessions.c.id == bindparam("id")))
DELETE_MESSAGE = compile_sql(delete(messages).where(messages.c.id == bindparam("id")))
DELETE_PART = compile_sql(delete(parts).where(parts.c.id == bindparam("id")))
DELETE_PARTS_OF_MESSAGE = compile_sql(delete(parts).where(parts.c.message_id == bindparam("message_id")))
DELETE_SESSION_ROWS = {
    table.name: compile_sql(delete(table).where(table.c.session_id == bindparam("session_id")))
    for table in (parts, messages, inputs, shares, snapshots, todos)
}
UPSERT_TODOS = _upsert(todos)
TODOS = compile_sql(select(todos.c.todos).where(todos.c.session_id == bindparam("session_id")), quick=True)
INSERT_SAVED_PERMISSION = compile_sql(
    saved_permissions.insert().values({c.name: bindparam(c.name) for c in saved_permissions.columns})
)
SAVED_PERMISSIONS = compile_sql(
    select(saved_permissions)
    .where(saved_permissions.c.project_id == bindparam("project_id"))
    .order_by(saved_permissions.c.time_created),
    quick=True,
)
ALL_SAVED_PERMISSIONS = compile_sql(select(saved_permissions).order_by(saved_permissions.c.time_created))
DELETE_SAVED_PERMISSION = compile_sql(delete(saved_permissions).where(saved_permissions.c.id == bindparam("id")))


INSERT_SNAPSHOT = compile_sql(snapshots.insert().values({c.name: bindparam(c.name) for c in snapshots.columns}))
LATEST_SNAPSHOT = compile_sql(
    select(snapshots)
    .where(snapshots.c.session_id == bindparam("session_id"))
    .order_by(snapshots.c.version.desc())
    .limit(literal_column("1")),
    quick=True,
)
INSERT_SHARE = compile_sql(shares.insert().values({c.name: bindparam(c.name) for c in shares.columns}))
SHARE_SESSION = compile_sql(select(shares.c.session_id).where(shares.c.token == bindparam("token")), quick=True)
PROMOTE_INPUT = compile_sql(
    update(inputs).where(inputs.c.id == bindparam("id")).values(promoted_seq=bindparam("promoted_seq"))
)
COMPLETE_INPUT = compile_sql(update(inputs).where(inputs.c.id == bindparam("id")).values(completed=true()))
COMPLETE_INPUTS_THROUGH = compile_sql(
    update(inputs)
    .where(
        inputs.c.session_id == bindparam("session_id"),
        inputs.c.completed.is_(False),
        inputs.c.admitted_seq <= bindparam("through_seq"),
    )
    .values(completed=true())
)


# -- leases (shared databases) --------------------------------------------------------------------
def _lease_acquire(insert: Insert) -> ClauseElement:
    """Take the lease if it is free, expired or already ours; a new token either way."""
    statement = insert(leases).values(
        session_id=bindparam("session_id"),
        owner=bindparam("owner"),
        token=literal_column("1"),
        expires_at=bindparam("expires_at"),
    )
    return statement.on_conflict_do_update(
        index_elements=["session_id"],
        set_={
            "owner": statement.excluded.owner,
            "token": leases.c.token + literal_column("1"),
            "expires_at": statement.excluded.expires_at,
        },
        where=(leases.c.owner == bindparam("owner")) | (leases.c.expires_at < bindparam("now")),
    ).returning(leases.c.token)


LEASE_ACQUIRE = compile_insert(_lease_acquire)
LEASE = compile_sql(
    select(leases.c.owner, leases.c.token, leases.c.expires_at).where(leases.c.session_id == bindparam("session_id")),
    quick=True,
)
LEASE_RENEW = compile_sql(
    update(leases).where(leases.c.owner == bindparam("owner")).values(expires_at=bindparam("expires_at"))
)
LEASE_RELEASE = compile_sql(
    delete(leases).where(
        leases.c.session_id == bindparam("session_id"),
        leases.c.owner == bindparam("owner"),
        leases.c.token == bindparam("token"),
    )
)
LIVE_LEASES = compile_sql(select(leases.c.session_id, leases.c.owner).where(leases.c.expires_at >= bindparam("now")))
EXPIRED_LEASES = compile_sql(select(leases.c.session_id).where(leases.c.expires_at < bindparam("now")))
NOTIFY = compile_sql(select(func.pg_notify(bindparam("channel"), bindparam("payload"))))  # PostgreSQL only

# -- reads ----------------------------------------------------------------------------------------
SESSION_INFO = compile_sql(select(sessions.c.info).where(sessions.c.id == bindparam("id")), quick=True)
MAX_CURSOR = compile_sql(select(func.coalesce(func.max(events.c.id), literal_column("0"))), quick=True)
MAX_SEQ = compile_sql(select(func.max(events.c.seq)).where(events.c.session_id == bindparam("session_id")), quick=True)
EVENTS_SINCE = compile_sql(
    select(events).where(events.c.id > bindparam("cursor")).order_by(events.c.id).limit(bindparam("limit"))
)
EVENTS_SINCE_IN_DIRECTORY = compile_sql(
    select(events)
    .where(events.c.id > bindparam("cursor"), events.c.directory == bindparam("directory"))
    .order_by(events.c.id)
    .limit(bindparam("limit"))
)
MESSAGE_INFO = compile_sql(
    select(messages.c.info).where(messages.c.id == bindparam("id"), messages.c.session_id == bindparam("session_id")),
    quick=True,
)
MESSAGE_ID_EXISTS = compile_sql(select(messages.c.id).where(messages.c.id == bindparam("id")), quick=True)
PART_ID_EXISTS = compile_sql(select(parts.c.id).where(parts.c.id == bindparam("id")), quick=True)
PARTS_OF_MESSAGE = compile_sql(
    select(parts.c.data).where(parts.c.message_id == bindparam("id")).order_by(parts.c.id), quick=True
)
PARTS_OF_SESSION = compile_sql(
    select(parts.c.message_id, parts.c.data)
    .where(parts.c.session_id == bindparam("session_id"))
    .order_by(parts.c.message_id, parts.c.id)
)
PARTS_IN_RANGE = compile_sql(
    select(parts.c.message_id, parts.c.data)
    .where(
        parts.c.session_id == bindparam("session_id"),
        parts.c.message_id.between(bindparam("first"), bindparam("last")),
    )
    .order_by(parts.c.message_id, parts.c.id)
)
ALL_MESSAGES = compile_sql(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"))
    .order_by(messages.c.id)
)
ALL_MESSAGES_IN_SEQ = compile_sql(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"))
    .order_by(messages.c.seq, messages.c.id)
)
MESSAGES_FROM_SEQ = compile_sql(
    select(messages.c.id)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.seq >= bindparam("seq"))
    .order_by(messages.c.seq, messages.c.id)
)
PART_IDS_FROM = compile_sql(
    select(parts.c.id)
    .where(parts.c.message_id == bindparam("message_id"), parts.c.id >= bindparam("part_id"))
    .order_by(parts.c.id)
)
MESSAGE_COUNT = compile_sql(
    select(func.count()).select_from(messages).where(messages.c.session_id == bindparam("session_id")),
    quick=True,
)
# A turn's window: the messages after a log position, their parts, and the prompts admitted but not
# yet promoted into a step (the model's context leaves those out). Three reads, not one join: the
# join copied each message's info onto every part row and looked up an input for every row, so a
# long history cost about 15% more to read (bench/README.md, "A step's fixed costs").
WINDOW_MESSAGES = compile_sql(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.seq > bindparam("seq"))
    .order_by(messages.c.seq, messages.c.id),
    quick=True,
)
WINDOW_PARTS_ALL = compile_sql(
    select(parts.c.message_id, parts.c.data)
    .where(parts.c.session_id == bindparam("session_id"))
    .order_by(parts.c.message_id, parts.c.id),
    quick=True,
)
WINDOW_PARTS_AFTER_SEQ = compile_sql(
    select(parts.c.message_id, parts.c.data)
    .select_from(messages.join(parts, parts.c.message_id == messages.c.id))
    .where(messages.c.session_id == bindparam("session_id"), messages.c.seq > bindparam("seq"))
    .order_by(parts.c.message_id, parts.c.id),
    quick=True,
)
WAITING_INPUTS = compile_sql(
    select(inputs.c.id).where(
        inputs.c.session_id == bindparam("session_id"),
        inputs.c.completed.is_(False),
        inputs.c.promoted_seq.is_(None),
    ),
    quick=True,
)
FORK_TITLES = compile_sql(
    select(func.count()).select_from(sessions).where(sessions.c.title.like(bindparam("prefix"), escape="\\"))
)
COPY_SOURCE = compile_sql(
    select(messages.c.id, messages.c.role, messages.c.time_created, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.seq < bindparam("before_seq"))
    .order_by(messages.c.seq, messages.c.id)
)
MESSAGE_SEQ = compile_sql(
    select(messages.c.seq).where(messages.c.id == bindparam("id"), messages.c.session_id == bindparam("session_id")),
    quick=True,
)
LAST_ASSISTANTS = compile_sql(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.role == literal_column("'assistant'"))
    .order_by(messages.c.id.desc())
    .limit(bindparam("limit")),
    quick=True,
)
INPUT_BY_ID = compile_sql(select(inputs).where(inputs.c.id == bindparam("id")), quick=True)
UNSETTLED_INPUTS = compile_sql(
    select(inputs)
    .where(inputs.c.session_id == bindparam("session_id"), inputs.c.completed.is_(False))
    .order_by(inputs.c.admitted_seq),
    quick=True,
)


# Recovery: what a crash can leave open. Stored JSON is compact (orjson) and escapes quotes inside
# strings, so these patterns match only the objects' own keys; callers still check the decoded rows.
@lru_cache(maxsize=2)
def open_assistant_messages(*, of_session: bool) -> Statement:
    """``(session_id, id)`` of assistant messages never completed (of one session, or all)."""
    query = select(messages.c.session_id, messages.c.id).where(
        messages.c.role == literal_column("'assistant'"),
        messages.c.info.not_like(literal_column("'%\"completed\":%'")),
    )
    if of_session:
        query = query.where(messages.c.session_id == bindparam("session_id"))
    return compile_sql(query)


@lru_cache(maxsize=2)
def open_tool_parts(*, of_session: bool) -> Statement:
    """``(session_id, data)`` of tool parts that may be pending or running (callers check)."""
    query = select(parts.c.session_id, parts.c.data).where(
        parts.c.data.like(literal_column('\'%"type":"tool"%\'')),
        parts.c.data.like(literal_column('\'%"status":"pending"%\''))
        | parts.c.data.like(literal_column('\'%"status":"running"%\'')),
    )
    if of_session:
        query = query.where(parts.c.session_id == bindparam("session_id"))
    return compile_sql(query)


SESSIONS_WITH_UNSETTLED_INPUTS = compile_sql(
    select(inputs.c.session_id).where(inputs.c.completed.is_(False)).distinct()
)


SESSION_EVENTS_AFTER = compile_sql(
    select(events)
    .where(events.c.session_id == bindparam("session_id"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)


@lru_cache(maxsize=16)
def messages_page(*, descending: bool, bounded: bool, by_seq: bool, offset: bool = False) -> Statement:
    """A page of a session's messages ordered by id (legacy) or by entry position (``seq``, V2),
    optionally strictly past a bound (an id, or a seq)."""
    key = messages.c.seq if by_seq else messages.c.id
    query = select(messages.c.id, messages.c.info).where(messages.c.session_id == bindparam("session_id"))
    if bounded:
        query = query.where(key < bindparam("bound") if descending else key > bindparam("bound"))
    keys = [key, messages.c.id] if by_seq else [key]
    order = [k.desc() for k in keys] if descending else [k.asc() for k in keys]
    query = query.order_by(*order).limit(bindparam("limit"))
    if offset:
        query = query.offset(bindparam("offset"))
    return compile_sql(query)


@lru_cache(maxsize=32)
def sessions_page(*, descending: bool, anchored: bool, directory: bool, search: bool) -> Statement:
    """Keyset page of sessions ordered by (time_updated, id), after an anchor row when given."""
    query = select(sessions.c.info)
    if directory:
        query = query.where(sessions.c.directory == bindparam("directory"))
    if search:
        query = query.where(sessions.c.title.ilike(bindparam("search"), escape="\\"))
    if anchored:
        time: BindParameter[int] = bindparam("anchor_time")
        sid: BindParameter[str] = bindparam("anchor_id")
        if descending:
            query = query.where(
                (sessions.c.time_updated < time) | ((sessions.c.time_updated == time) & (sessions.c.id < sid))
            )
        else:
            query = query.where(
                (sessions.c.time_updated > time) | ((sessions.c.time_updated == time) & (sessions.c.id > sid))
            )
    if descending:
        query = query.order_by(sessions.c.time_updated.desc(), sessions.c.id.desc())
    else:
        query = query.order_by(sessions.c.time_updated.asc(), sessions.c.id.asc())
    return compile_sql(query.limit(bindparam("limit")))


@lru_cache(maxsize=64)
def session_list(*, directory: bool, roots: bool, parent: bool, start: bool, search: bool, limit: bool) -> Statement:
    """The session list query for one combination of filters (compiled once per combination)."""
    query = select(sessions.c.info).order_by(sessions.c.time_updated.desc(), sessions.c.id)
    if directory:
        query = query.where(sessions.c.directory == bindparam("directory"))
    if roots:
        query = query.where(sessions.c.parent_id.is_(None))
    if parent:
        query = query.where(sessions.c.parent_id == bindparam("parent_id"))
    if start:
        query = query.where(sessions.c.time_updated >= bindparam("start"))
    if search:
        query = query.where(sessions.c.title.ilike(bindparam("search"), escape="\\"))
    if limit:
        query = query.limit(bindparam("limit"))
    return compile_sql(query)
