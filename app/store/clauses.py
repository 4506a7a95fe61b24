"""Every SQL statement the running server issues, defined with SQLAlchemy Core from the table
definitions (app/store/schema.py).

The server does not import this module to run on SQLite: ``python -m app.store.clauses`` compiles
every definition here (each combination of a function's flags too) for both dialects and writes
them, as ``Statement`` values, with the schema's DDL, to app/store/sql.py, which the server imports
instead: importing SQLAlchemy was a large part of the server's start-up. tests/store/test_schema.py
checks that app/store/sql.py is current: after changing a definition, run
``python -m app.store.clauses``.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ClauseElement,
    String,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    delete,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from app.store.events import CURSOR_BITS
from app.store.schema import (
    credentials,
    events,
    inputs,
    leases,
    mcp_changes,
    messages,
    metadata,
    parts,
    project_places,
    projects,
    pty_owners,
    request_keys,
    reverts,
    saved_permissions,
    sessions,
    shares,
    snapshots,
    todos,
)

_DIALECT = sqlite.dialect(paramstyle="named")
GENERATED = Path(__file__).with_name("sql.py")


@dataclass(frozen=True)
class Clause:
    """One statement's definition: the clause both dialects share, or with ``postgres`` the
    PostgreSQL form where their syntax differs (upserts). ``quick`` marks a read bounded by an
    index lookup: a row or a few, or the turn's own window (see ``SqliteDatabase.fetch``)."""

    clause: ClauseElement
    postgres: Callable[[], ClauseElement] | None = None
    quick: bool = False

    def for_sqlite(self) -> str:
        # SQLite's compiler pairs a bound LIMIT with an (unneeded) bound OFFSET; drop it.
        text = str(self.clause.compile(dialect=_DIALECT)).replace(" OFFSET :param_1", "")
        anonymous = re.findall(r":(\w+_\d+)\b", text)
        if anonymous:  # a Python literal became a parameter nobody will supply
            raise ValueError(f"statement has anonymous parameters {anonymous}; use bindparam() or literal_column()")
        return text

    def for_postgres(self) -> tuple[str, tuple[str, ...]]:
        from sqlalchemy.dialects.postgresql import asyncpg

        clause = self.postgres() if self.postgres is not None else self.clause
        compiled = clause.compile(dialect=asyncpg.dialect(paramstyle="numeric_dollar"))
        names: list[str] = getattr(compiled, "positiontup", None) or []
        return str(compiled), tuple(names)


def _upsert_clause(insert: Insert, table: Table, keep: tuple[str, ...]) -> ClauseElement:
    columns = [c.name for c in table.columns]
    key = [c.name for c in table.primary_key.columns]
    statement = insert(table).values({name: bindparam(name) for name in columns})
    upsert: ClauseElement = statement.on_conflict_do_update(
        index_elements=key,
        set_={name: statement.excluded[name] for name in columns if name not in key and name not in keep},
    )
    return upsert


def _postgres_insert(table: Table) -> Any:
    from sqlalchemy.dialects import postgresql

    return postgresql.insert(table)


Insert = Callable[[Table], Any]  # a dialect's insert(), with its ON CONFLICT clauses


def dialect_insert(build: Callable[[Insert], ClauseElement]) -> Clause:
    """A statement whose ON CONFLICT syntax each dialect builds with its own ``insert``."""
    return Clause(build(sqlite.insert), postgres=lambda: build(_postgres_insert))


def _upsert(table: Table, *, keep: tuple[str, ...] = ()) -> Clause:
    """Insert or update by primary key; columns in ``keep`` retain their first value."""
    return dialect_insert(lambda insert: _upsert_clause(insert, table, keep))


# -- writes ---------------------------------------------------------------------------------------
UPSERT_SESSION = _upsert(sessions)
UPSERT_MESSAGE = _upsert(messages, keep=("seq",))
UPSERT_PART = _upsert(parts)
# Upserts into different tables commute (no foreign keys, triggers or reads between them): a write
# transaction may regroup a run of them by statement, each keeping its own row order
# (``Statement.commutes``).
COMMUTING = ("UPSERT_SESSION", "UPSERT_MESSAGE", "UPSERT_PART")
INSERT_EVENT = Clause(events.insert().values({c.name: bindparam(c.name) for c in events.columns}))
INSERT_INPUT = Clause(inputs.insert().values({c.name: bindparam(c.name) for c in inputs.columns}))
DELETE_SESSION = Clause(delete(sessions).where(sessions.c.id == bindparam("id")))
DELETE_MESSAGE = Clause(delete(messages).where(messages.c.id == bindparam("id")))
DELETE_PART = Clause(delete(parts).where(parts.c.id == bindparam("id")))
DELETE_PARTS_OF_MESSAGE = Clause(delete(parts).where(parts.c.message_id == bindparam("message_id")))
DELETE_SESSION_ROWS = {
    table.name: Clause(delete(table).where(table.c.session_id == bindparam("session_id")))
    for table in (parts, messages, inputs, shares, snapshots, todos, reverts, request_keys)
}
SAVE_REVERT = _upsert(reverts)
REVERT = Clause(select(reverts.c.journal).where(reverts.c.session_id == bindparam("session_id")), quick=True)
REVERTS_UNDER_WAY = Clause(select(reverts.c.session_id))
UPSERT_TODOS = _upsert(todos)
TODOS = Clause(select(todos.c.todos).where(todos.c.session_id == bindparam("session_id")), quick=True)
INSERT_SAVED_PERMISSION = Clause(
    saved_permissions.insert().values({c.name: bindparam(c.name) for c in saved_permissions.columns})
)
SAVED_PERMISSIONS = Clause(
    select(saved_permissions)
    .where(saved_permissions.c.project_id == bindparam("project_id"))
    .order_by(saved_permissions.c.time_created),
    quick=True,
)
ALL_SAVED_PERMISSIONS = Clause(select(saved_permissions).order_by(saved_permissions.c.time_created))
DELETE_SAVED_PERMISSION = Clause(delete(saved_permissions).where(saved_permissions.c.id == bindparam("id")))
UPSERT_PROJECT = _upsert(projects)
PROJECT = Clause(select(projects.c.info, projects.c.time_updated).where(projects.c.id == bindparam("id")), quick=True)
ALL_PROJECTS = Clause(select(projects.c.id, projects.c.info, projects.c.time_updated))
UPSERT_PROJECT_PLACE = _upsert(project_places)
PROJECT_PLACE = Clause(select(project_places).where(project_places.c.directory == bindparam("directory")), quick=True)
ALL_PROJECT_PLACES = Clause(select(project_places))
UPSERT_CREDENTIAL = _upsert(credentials)
ALL_CREDENTIALS = Clause(select(credentials.c.provider_id, credentials.c.info))
DELETE_CREDENTIAL = Clause(delete(credentials).where(credentials.c.provider_id == bindparam("provider_id")))
UPSERT_MCP_CHANGE = _upsert(mcp_changes)
ALL_MCP_CHANGES = Clause(select(mcp_changes).order_by(mcp_changes.c.version))


INSERT_SUMMARY = Clause(snapshots.insert().values({c.name: bindparam(c.name) for c in snapshots.columns}))
LATEST_SUMMARY = Clause(
    select(snapshots)
    .where(snapshots.c.session_id == bindparam("session_id"))
    .order_by(snapshots.c.version.desc())
    .limit(literal_column("1")),
    quick=True,
)
INSERT_REQUEST_KEY = Clause(request_keys.insert().values({c.name: bindparam(c.name) for c in request_keys.columns}))
REQUEST_KEY = Clause(
    select(request_keys.c.session_id, request_keys.c.request, request_keys.c.message_id).where(
        request_keys.c.request_key == bindparam("key")
    ),
    quick=True,
)
INSERT_SHARE = Clause(shares.insert().values({c.name: bindparam(c.name) for c in shares.columns}))
SHARE_SESSION = Clause(select(shares.c.session_id).where(shares.c.token == bindparam("token")), quick=True)
PROMOTE_INPUT = Clause(
    update(inputs).where(inputs.c.id == bindparam("id")).values(promoted_seq=bindparam("promoted_seq"))
)
COMPLETE_INPUT = Clause(update(inputs).where(inputs.c.id == bindparam("id")).values(completed=true()))


# -- leases (shared databases) --------------------------------------------------------------------
def _lease_reserve(insert: Insert) -> ClauseElement:
    """Reserve a free session for its admitting process (in the admission's transaction), so
    every process sees it busy from then on; a lease already there, live or expired, is left as
    it is (its owner drains, or whoever claims it takes it over). Its token is one never handed
    out before (migration 0021's sequence): a drain that lost an earlier lease of the session
    must not pass the fence with it."""
    statement = insert(leases).values(
        session_id=bindparam("session_id"),
        owner=bindparam("owner"),
        token=literal_column("nextval('opensession_lease_tokens')"),
        expires_at=bindparam("expires_at"),
    )
    reserve: ClauseElement = statement.on_conflict_do_nothing(index_elements=["session_id"])
    return reserve


LEASE_RESERVE = dialect_insert(_lease_reserve)
LEASE_RENEW = Clause(
    update(leases).where(leases.c.owner == bindparam("owner")).values(expires_at=bindparam("expires_at"))
)
LIVE_LEASES = Clause(select(leases.c.session_id, leases.c.owner).where(leases.c.expires_at >= bindparam("now")))
LIVE_LEASE = Clause(
    select(leases.c.owner).where(
        leases.c.session_id == bindparam("session_id"), leases.c.expires_at >= bindparam("now")
    )
)
ALL_LEASES = Clause(select(leases.c.session_id, leases.c.owner, leases.c.token, leases.c.expires_at))
# -- pty owners (shared databases) ----------------------------------------------------------------
SAVE_PTY_OWNER = _upsert(pty_owners)
DELETE_PTY_OWNER = Clause(delete(pty_owners).where(pty_owners.c.id == bindparam("id")))
DELETE_EXPIRED_PTYS = Clause(delete(pty_owners).where(pty_owners.c.expires_at < bindparam("before")))
PTY_OWNER = Clause(
    select(pty_owners.c.owner, pty_owners.c.url).where(
        pty_owners.c.id == bindparam("id"), pty_owners.c.expires_at >= bindparam("now")
    ),
    quick=True,
)
LIVE_PTYS_IN_DIRECTORY = Clause(
    select(pty_owners.c.id, pty_owners.c.owner, pty_owners.c.info)
    .where(pty_owners.c.directory == bindparam("directory"), pty_owners.c.expires_at >= bindparam("now"))
    .order_by(pty_owners.c.id)
)

# -- reads ----------------------------------------------------------------------------------------
SESSION_INFO = Clause(select(sessions.c.info).where(sessions.c.id == bindparam("id")), quick=True)
MAX_CURSOR = Clause(select(func.coalesce(func.max(events.c.id), literal_column("0"))), quick=True)
MAX_SEQ = Clause(select(func.max(events.c.seq)).where(events.c.session_id == bindparam("session_id")), quick=True)
# PostgreSQL only (so not ``quick``: SQLite never runs them); the functions are migration 0012's.
# What a write transaction on a shared database reads first, in one round trip: where its cursors
# start and, for the session its task drains (``session_id``; "" for none), the session's hold,
# its last seq, its lease, its info (migration 0013), its revert journal (0014) and when its lease
# expires (0015).
WRITE_HEAD = Clause(
    select(
        literal_column("first_cursor"),
        literal_column("last_seq"),
        literal_column("lease_owner"),
        literal_column("lease_token"),
        literal_column("session_info"),
        literal_column("revert_journal"),
        literal_column("lease_expires"),
    ).select_from(func.opensession_write_head(bindparam("session_id", type_=String)))
)


def _typed_params(**types: Any) -> list[BindParameter[Any]]:
    """A function's arguments, bound by name with their types (a NULL must know its type)."""
    return [bindparam(name, type_=kind) for name, kind in types.items()]


# The session's hold, and its last seq as the hold leaves it (-1 before its first event).
HOLD_SESSION = Clause(select(func.opensession_hold_session(bindparam("session_id", type_=String))))
# The same in a transaction without an id yet, which it takes right after the hold (migration 0018).
HOLD_NUMBERED = Clause(
    select(literal_column("last_seq"), literal_column("first_cursor")).select_from(
        func.opensession_hold_numbered(bindparam("session_id", type_=String))
    )
)
# A claim of a session's drain lease, one statement in a transaction of its own (migration 0013):
# the session's last seq under its hold, the lease's owner before, and the new token (NULL:
# another live owner keeps it).
LEASE_CLAIM = Clause(
    select(literal_column("last_seq"), literal_column("previous_owner"), literal_column("token")).select_from(
        func.opensession_claim(*_typed_params(session_id=String, owner=String, expires_at=BigInteger, now=BigInteger))
    )
)
# Give a drain lease up unless an input admitted after ``admitted_after`` (NULL: regardless) waits.
LEASE_RELEASE = Clause(
    select(
        func.opensession_release(
            *_typed_params(session_id=String, owner=String, token=BigInteger, admitted_after=BigInteger)
        )
    )
)
# ``WriteScope.hold``: the advisory lock of a key, to the end of the transaction (the key space of
# the sessions' holds: a session id held here is that session's hold).
HOLD = Clause(
    select(func.pg_advisory_xact_lock(literal_column("1869636974"), func.hashtext(bindparam("key", type_=String))))
)
SETTLED = Clause(select(func.opensession_settled()))
# What had committed at this moment (``events.Snapshot``): "xmin:xmax:running,...".
SNAPSHOT = Clause(select(cast(func.pg_current_snapshot(), Text)))
# The relay's catch-up (app/events/relay.py): up to ``limit`` settled events past ``cursor`` and up
# to ``upto``, in order, but those of the transactions ``skip`` (ids: the relay has their events),
# then a row of the settled horizon (its other columns NULL): whether ``upto`` has settled comes
# with the events, not in a round trip of its own.
_SETTLED_UPTO = (
    select(events)
    .where(
        events.c.id > bindparam("cursor"),
        events.c.id <= bindparam("upto"),
        events.c.id < select(func.opensession_settled()).scalar_subquery(),
        events.c.id.op(">>")(literal_column(str(CURSOR_BITS)))
        != func.all(bindparam("skip", type_=postgresql.ARRAY(BigInteger))),
    )
    .order_by(events.c.id)
    .limit(bindparam("limit"))
    .subquery()
)
RELAY_CATCH_UP = Clause(
    union_all(select(_SETTLED_UPTO), select(func.opensession_settled(), *[null() for _ in events.columns[1:]]))
)
# The newest cursor no transaction can still add an event below (where a process starts publishing).
SETTLED_CURSOR = Clause(
    select(func.coalesce(func.max(events.c.id), literal_column("0"))).where(
        events.c.id < select(func.opensession_settled()).scalar_subquery()
    )
)
MESSAGE_ID_EXISTS = Clause(select(messages.c.id).where(messages.c.id == bindparam("id")), quick=True)
PART_ID_EXISTS = Clause(select(parts.c.id).where(parts.c.id == bindparam("id")), quick=True)
# A message's info (kind 0; no row: not in that session), then its parts in order (kind 1).
MESSAGE_WITH_PARTS = Clause(
    union_all(
        select(literal_column("0").label("kind"), messages.c.info.label("data"), messages.c.id.label("k")).where(
            messages.c.id == bindparam("id"), messages.c.session_id == bindparam("session_id")
        ),
        select(literal_column("1"), parts.c.data, parts.c.id).where(
            parts.c.message_id == bindparam("id"), parts.c.session_id == bindparam("session_id")
        ),
    ).order_by(literal_column("kind"), literal_column("k")),
    quick=True,
)
PARTS_OF_SESSION = Clause(
    select(parts.c.message_id, parts.c.data)
    .where(parts.c.session_id == bindparam("session_id"))
    .order_by(parts.c.message_id, parts.c.id)
)
PARTS_IN_RANGE = Clause(
    select(parts.c.message_id, parts.c.data)
    .where(
        parts.c.session_id == bindparam("session_id"),
        parts.c.message_id.between(bindparam("first"), bindparam("last")),
    )
    .order_by(parts.c.message_id, parts.c.id)
)
ALL_MESSAGES = Clause(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"))
    .order_by(messages.c.id)
)
ALL_MESSAGES_IN_SEQ = Clause(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"))
    .order_by(messages.c.seq, messages.c.id)
)
MESSAGES_FROM_SEQ = Clause(
    select(messages.c.id)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.seq >= bindparam("seq"))
    .order_by(messages.c.seq, messages.c.id)
)
PART_IDS_FROM = Clause(
    select(parts.c.id)
    .where(parts.c.message_id == bindparam("message_id"), parts.c.id >= bindparam("part_id"))
    .order_by(parts.c.id)
)
MESSAGE_COUNT = Clause(
    select(func.count()).select_from(messages).where(messages.c.session_id == bindparam("session_id")),
    quick=True,
)


# A turn's window: the messages after a log position, their parts, and the prompts admitted but not
# yet promoted into a step (the model's context leaves those out). Three reads, not one join: the
# join copied each message's info onto every part row and looked up an input for every row, so a
# long history cost more to read (bench/README.md, "A step's fixed costs").
def _window_rows() -> list[Any]:
    """A session's window as rows of seven columns (kind, a, b, s, t, v, w): its latest summary
    (kind 3: message id, text, through seq, reason, version, time created; no row without one), its
    messages past that summary's seq (kind 0: id, info, in entry order) and their parts (kind 1:
    message id, data, in message and part id order; without a summary every part of the session,
    one range of its index). Which parts branch runs is decided once per read (the planner's
    one-time filter on the summary's existence)."""
    latest = (
        select(snapshots)
        .where(snapshots.c.session_id == bindparam("session_id"))
        .order_by(snapshots.c.version.desc())
        .limit(literal_column("1"))
        .cte("latest")
    )
    through = select(latest.c.through_seq).scalar_subquery()
    after = func.coalesce(through, literal_column("-1"))  # without a summary: every message
    summary_rows = select(
        literal_column("3").label("kind"),
        latest.c.message_id.label("a"),
        latest.c.summary.label("b"),
        latest.c.through_seq.label("s"),
        latest.c.reason.label("t"),
        latest.c.version.label("v"),
        latest.c.time_created.label("w"),
    )
    message_rows = select(
        literal_column("0"), messages.c.id, messages.c.info, messages.c.seq, messages.c.id, _NO_VALUE, _NO_VALUE
    ).where(messages.c.session_id == bindparam("session_id"), messages.c.seq > after)
    part_columns: tuple[Any, ...] = (
        literal_column("1"),
        parts.c.message_id,
        parts.c.data,
        literal_column("0"),
        parts.c.id,
    )
    every_part = select(*part_columns, _NO_VALUE, _NO_VALUE).where(
        parts.c.session_id == bindparam("session_id"), ~exists(select(latest.c.version))
    )
    later_parts = (
        select(*part_columns, _NO_VALUE, _NO_VALUE)
        .select_from(messages.join(parts, parts.c.message_id == messages.c.id))
        .where(
            messages.c.session_id == bindparam("session_id"),
            parts.c.session_id == bindparam("session_id"),
            messages.c.seq > through,
            exists(select(latest.c.version)),  # decided once: without a summary, not run at all
        )
    )
    return [summary_rows, message_rows, every_part, later_parts]


_NO_VALUE = cast(null(), BigInteger)
_UNSETTLED = and_(inputs.c.session_id == bindparam("session_id"), inputs.c.completed.is_(False))
_IN_ORDER: tuple[Any, ...] = (literal_column("kind"), literal_column("s"), literal_column("a"), literal_column("t"))
# The window (``_window_rows``) and the prompts admitted but not yet promoted (kind 2: id).
WINDOW = Clause(
    union_all(
        *_window_rows(),
        select(
            literal_column("2"),
            inputs.c.id,
            cast(null(), String),
            literal_column("0"),
            inputs.c.id,
            _NO_VALUE,
            _NO_VALUE,
        ).where(_UNSETTLED, inputs.c.promoted_seq.is_(None)),
    ).order_by(*_IN_ORDER),
    quick=True,
)
# What a drain reads before each step, in one read: the session (kind 4: id, info; no row: no
# session), its unsettled inputs in admission order (kind 5: id, prompt, admitted seq, delivery,
# promoted seq, time created) and, when it has any, the window its step sends the model
# (``_window_rows``; the one-time filter leaves it out of the read that finds nothing to do).
STEP_WORK = Clause(
    union_all(
        select(
            literal_column("4").label("kind"),
            sessions.c.id.label("a"),
            sessions.c.info.label("b"),
            literal_column("0").label("s"),
            sessions.c.id.label("t"),
            _NO_VALUE.label("v"),
            _NO_VALUE.label("w"),
        ).where(sessions.c.id == bindparam("session_id")),
        select(
            literal_column("5"),
            inputs.c.id,
            inputs.c.prompt,
            inputs.c.admitted_seq,
            inputs.c.delivery,
            inputs.c.promoted_seq,
            inputs.c.time_created,
        ).where(_UNSETTLED),
        *[rows.where(exists(select(inputs.c.id).where(_UNSETTLED))) for rows in _window_rows()],
    ).order_by(*_IN_ORDER),
    quick=True,
)
# Every directory that has sessions, with its latest activity, most recent first (GET /project):
# one row per directory, read from the (directory, time_updated) index alone.
SESSION_DIRECTORIES = Clause(
    select(sessions.c.directory, func.max(sessions.c.time_updated).label("updated"))
    .group_by(sessions.c.directory)
    .order_by(literal_column("updated").desc())
)
COPY_SOURCE = Clause(
    select(messages.c.id, messages.c.role, messages.c.time_created, messages.c.info)
    .where(
        messages.c.session_id == bindparam("session_id"),
        or_(cast(bindparam("before_id"), String).is_(None), messages.c.id < bindparam("before_id")),
    )
    .order_by(messages.c.id)
)
MESSAGE_SEQ = Clause(
    select(messages.c.seq).where(messages.c.id == bindparam("id"), messages.c.session_id == bindparam("session_id")),
    quick=True,
)
LAST_ASSISTANTS = Clause(
    select(messages.c.id, messages.c.info)
    .where(messages.c.session_id == bindparam("session_id"), messages.c.role == literal_column("'assistant'"))
    .order_by(messages.c.id.desc())
    .limit(bindparam("limit")),
    quick=True,
)
INPUT_BY_ID = Clause(select(inputs).where(inputs.c.id == bindparam("id")), quick=True)
INPUT_BY_REQUEST_KEY = Clause(
    select(inputs).where(inputs.c.session_id == bindparam("session_id"), inputs.c.request_key == bindparam("key")),
    quick=True,
)
UNSETTLED_INPUTS = Clause(
    select(inputs)
    .where(inputs.c.session_id == bindparam("session_id"), inputs.c.completed.is_(False))
    .order_by(inputs.c.admitted_seq),
    quick=True,
)


# Recovery: what a crash can leave open. Stored JSON is compact (orjson) and escapes quotes inside
# strings, so these patterns match only the objects' own keys; callers still check the decoded rows.
def open_assistant_messages(*, of_session: bool) -> Clause:
    """``(session_id, id)`` of assistant messages never completed (of one session, or all)."""
    query = select(messages.c.session_id, messages.c.id).where(
        messages.c.role == literal_column("'assistant'"),
        messages.c.info.not_like(literal_column("'%\"completed\":%'")),
    )
    if of_session:
        query = query.where(messages.c.session_id == bindparam("session_id"))
    return Clause(query)


def events_since(*, settled: bool, in_directory: bool) -> Clause:
    """Up to ``limit`` events past ``cursor``, in order (of one ``directory``); ``settled``: only
    below ``opensession_settled()``, where transactions commit concurrently (PostgreSQL)."""
    query = select(events).where(events.c.id > bindparam("cursor"))
    if settled:
        query = query.where(events.c.id < select(func.opensession_settled()).scalar_subquery())
    if in_directory:
        query = query.where(events.c.directory == bindparam("directory"))
    return Clause(query.order_by(events.c.id).limit(bindparam("limit")))


def open_tool_parts(*, of_session: bool) -> Clause:
    """``(session_id, data)`` of tool parts that may be pending or running (callers check)."""
    query = select(parts.c.session_id, parts.c.data).where(
        parts.c.data.like(literal_column('\'%"type":"tool"%\'')),
        parts.c.data.like(literal_column('\'%"status":"pending"%\''))
        | parts.c.data.like(literal_column('\'%"status":"running"%\'')),
    )
    if of_session:
        query = query.where(parts.c.session_id == bindparam("session_id"))
    return Clause(query)


SESSIONS_WITH_UNSETTLED_INPUTS = Clause(select(inputs.c.session_id).where(inputs.c.completed.is_(False)).distinct())

# A round trip that reads nothing: whether the database answers (readiness).
PING = Clause(select(literal_column("1")))

# Prompts admitted and not yet answered, in every session (the metrics' queue depth).
UNSETTLED_INPUT_COUNT = Clause(select(func.count()).select_from(inputs).where(inputs.c.completed.is_(False)))

# Every assistant message created since a time, with its session's directory: what usage totals.
ASSISTANT_MESSAGES_SINCE = Clause(
    select(messages.c.time_created, messages.c.info, sessions.c.directory)
    .select_from(messages.join(sessions, sessions.c.id == messages.c.session_id))
    .where(messages.c.role == literal_column("'assistant'"), messages.c.time_created >= bindparam("since"))
)


SESSION_EVENTS_AFTER = Clause(
    select(events)
    .where(events.c.session_id == bindparam("session_id"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
    .limit(bindparam("limit"))
)


def messages_page(*, descending: bool, bounded: bool, by_seq: bool, offset: bool = False) -> Clause:
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
    return Clause(query)


def sessions_page(
    *,
    descending: bool,
    anchored: bool,
    directory: bool,
    search: bool,
    roots: bool = False,
    start: bool = False,
    before: bool = False,
) -> Clause:
    """Keyset page of sessions ordered by time updated, then newest first (session ids sort
    newest first, so the id runs the other way from the time), after an anchor row when given."""
    query = select(sessions.c.info)
    if directory:
        query = query.where(sessions.c.directory == bindparam("directory"))
    if roots:
        query = query.where(sessions.c.parent_id.is_(None))
    if start:
        query = query.where(sessions.c.time_updated >= bindparam("start"))
    if before:
        query = query.where(sessions.c.time_updated < bindparam("before"))
    if search:
        query = query.where(sessions.c.title.ilike(bindparam("search"), escape="\\"))
    if anchored:
        time: BindParameter[int] = bindparam("anchor_time")
        sid: BindParameter[str] = bindparam("anchor_id")
        if descending:
            query = query.where(
                (sessions.c.time_updated < time) | ((sessions.c.time_updated == time) & (sessions.c.id > sid))
            )
        else:
            query = query.where(
                (sessions.c.time_updated > time) | ((sessions.c.time_updated == time) & (sessions.c.id < sid))
            )
    if descending:
        query = query.order_by(sessions.c.time_updated.desc(), sessions.c.id.asc())
    else:
        query = query.order_by(sessions.c.time_updated.asc(), sessions.c.id.desc())
    return Clause(query.limit(bindparam("limit")))


def session_list(*, directory: bool, roots: bool, parent: bool, start: bool, search: bool, limit: bool) -> Clause:
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
    return Clause(query)


# The functions above with flags, and the combinations of their flags that callers reach: each
# fixes some flags and lets the others vary. Only those combinations are compiled into
# app/store/sql.py (any other is a LookupError there), so a caller passing a new combination adds
# it here.
Reach = tuple[dict[str, bool], ...]
VARIANTS: dict[Callable[..., Clause], Reach] = {
    events_since: ({},),
    open_assistant_messages: ({},),
    open_tool_parts: ({},),
    messages_page: (
        {"descending": True},  # a page before a message (History.get_messages, Queries.raw_messages)
        {"by_seq": True, "offset": False},  # either way past a message (History.page, the V2 list)
    ),
    sessions_page: (
        {"descending": True},  # the legacy lists (SessionService.walk for GET /session, across_projects)
        {"roots": False, "start": False, "before": False},  # the V2 list (SessionService.walk, page)
    ),
    session_list: (
        {"parent": False},  # SessionService.list
        {"directory": False, "roots": False, "parent": True, "start": False, "search": False, "limit": False},
    ),  # ^ a session's children (SessionService.children, descendants)
}


def _reached(function: Callable[..., Clause], reach: Reach) -> list[dict[str, bool]]:
    """Every combination of ``function``'s flags that ``reach`` allows, in a stable order."""
    names = list(inspect.signature(function).parameters)
    unknown = {flag for fixed in reach for flag in fixed} - set(names)
    if unknown:
        raise ValueError(f"{function.__name__} has no flags {sorted(unknown)}")
    every = (dict(zip(names, values, strict=True)) for values in itertools.product((False, True), repeat=len(names)))
    return [flags for flags in every if any(fixed.items() <= flags.items() for fixed in reach)]


_HEADER = '''"""Generated by ``python -m app.store.clauses`` from the definitions there; do not edit.

Every SQL statement the running server issues, compiled for SQLite and PostgreSQL, and the schema's
DDL for a new database: the server imports this module, not SQLAlchemy (app/store/clauses.py says
why)."""

from app.store.statement import Statement, Variants
'''


def _statement(clause: Clause, name: str, *, commutes: bool = False) -> str:
    postgres, params = clause.for_postgres()
    flags = (", quick=True" if clause.quick else "") + (", commutes=True" if commutes else "")
    return f"Statement({name!r}, {clause.for_sqlite()!r}, {postgres!r}, {params!r}{flags})"


def _variant(function: Callable[..., Clause], reach: Reach) -> str:
    name = function.__name__
    flags = list(inspect.signature(function).parameters.values())
    table = f"_{name.upper()}"
    lines = [f"{table} = Variants({name!r}, {{"]
    for kwargs in _reached(function, reach):
        called = f"{name}({', '.join(f'{flag}={value}' for flag, value in kwargs.items())})"
        lines.append(f"    {tuple(kwargs.values())!r}: {_statement(function(**kwargs), called)},")
    lines.append("})")
    params = ", ".join(f"{f.name}: bool" + (f" = {f.default!r}" if f.default is not f.empty else "") for f in flags)
    key = ", ".join(f.name for f in flags) + ("," if len(flags) == 1 else "")
    lines += [
        "",
        "",
        f"def {name}(*, {params}) -> Statement:",
        f'    """{inspect.getdoc(function)}"""',
        f"    return {table}[{key}]",
    ]
    return "\n".join(lines)


def render() -> str:
    """The text of app/store/sql.py."""
    parts = [_HEADER]
    for name, value in list(globals().items()):
        if isinstance(value, Clause):
            parts.append(f"{name} = {_statement(value, name, commutes=name in COMMUTING)}")
        elif isinstance(value, dict) and value and all(isinstance(v, Clause) for v in value.values()):
            entries = "".join(
                f"    {key!r}: {_statement(clause, f'{name}[{key!r}]')},\n" for key, clause in value.items()
            )
            parts.append(f"{name} = {{\n{entries}}}")
    parts += [f"\n\n{_variant(function, reach)}" for function, reach in VARIANTS.items()]
    dialect = sqlite.dialect()
    ddl = [str(CreateTable(table).compile(dialect=dialect)).strip() for table in metadata.sorted_tables]
    ddl += [
        str(CreateIndex(index).compile(dialect=dialect)).strip()
        for table in metadata.sorted_tables
        for index in sorted(table.indexes, key=lambda index: str(index.name))
    ]
    parts.append("\n# A new database's tables and indexes (what ``metadata.create_all`` issues).")
    parts.append("SCHEMA = (\n" + "".join(f"    {statement!r},\n" for statement in ddl) + ")")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write app/store/sql.py from these definitions.")
    parser.add_argument("--check", action="store_true", help="only check that it is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = GENERATED.read_text() == text
        print(
            "app/store/sql.py is current" if current else "app/store/sql.py is stale: run python -m app.store.clauses"
        )
        return 0 if current else 1
    GENERATED.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
