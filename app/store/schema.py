"""Tables. Wire objects (session info, message info, parts) are stored whole as JSON text next to
the few columns that queries filter or sort on; the JSON is what clients receive, so a read never
has to re-assemble an object from columns.

Invariants:
- ``events`` is the source of truth: one row per durable event, ``(session_id, seq)`` unique and
  gap-free per session, ``id`` a whole-server monotonically increasing cursor.
- ``sessions``/``messages``/``parts`` are projections written in the same transaction as the event.
- ``inputs`` is the admission queue: a row exists before the HTTP answer; ``promoted_seq`` is set
  when its turn starts and ``completed`` when the turn has settled (answered or aborted).
- ``reverts`` holds a row exactly while a revert or unrevert is moving a session's files.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL wants a 64-bit identity.
Cursor = BigInteger().with_variant(Integer(), "sqlite")

sessions = Table(
    "sessions",
    metadata,
    Column("id", String, primary_key=True),
    Column("directory", String, nullable=False),
    Column("parent_id", String, nullable=True),
    Column("title", String, nullable=False),
    Column("time_created", BigInteger, nullable=False),
    Column("time_updated", BigInteger, nullable=False),
    Column("info", Text, nullable=False),
    Index("ix_sessions_directory_updated", "directory", "time_updated"),
    Index("ix_sessions_parent", "parent_id"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String, primary_key=True),
    Column("session_id", String, nullable=False),
    Column("role", String, nullable=False),
    Column("time_created", BigInteger, nullable=False),
    Column("info", Text, nullable=False),
    # Log position at which the message entered the session: the order the model sees. Ids follow
    # admission order, which differs when a steered prompt overtakes queued ones.
    Column("seq", BigInteger, nullable=False),
    Index("ix_messages_session_id", "session_id", "id"),
    Index("ix_messages_session_seq", "session_id", "seq"),
)

parts = Table(
    "parts",
    metadata,
    Column("id", String, primary_key=True),
    Column("message_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_parts_message_id", "message_id", "id"),
    Index("ix_parts_session", "session_id", "message_id", "id"),
)

inputs = Table(
    "inputs",
    metadata,
    Column("id", String, primary_key=True),  # the user message id
    Column("session_id", String, nullable=False),
    Column("prompt", Text, nullable=False),
    Column("delivery", String, nullable=False),
    Column("admitted_seq", BigInteger, nullable=False),
    Column("promoted_seq", BigInteger, nullable=True),
    Column("completed", Boolean, nullable=False, default=False),
    Column("time_created", BigInteger, nullable=False),
    # The client's Idempotency-Key (nginx sends one per client request, the same on its retries):
    # a request repeated with it is the prompt already admitted, not a second one.
    Column("request_key", String, nullable=True),
    Index("ix_inputs_pending", "session_id", "completed", "admitted_seq"),
    Index("ix_inputs_request_key", "session_id", "request_key", unique=True),
)

events = Table(
    "events",
    metadata,
    Column("id", Cursor, primary_key=True, autoincrement=True),
    Column("event_id", String, nullable=False, unique=True),
    Column("session_id", String, nullable=False),
    Column("directory", String, nullable=True),
    Column("seq", BigInteger, nullable=False),
    Column("type", String, nullable=False),
    Column("data", Text, nullable=False),
    Column("time", BigInteger, nullable=False),
    UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
)

# Drain leases (databases shared by several processes): the owner drains the session; ``token``
# grows with every new lease and every write of a drain checks it (fencing); an owner that stops
# renewing ``expires_at`` (ms) loses the session to another process.
leases = Table(
    "leases",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("owner", String, nullable=False),
    Column("token", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)

# Self-hosted shares: an unguessable token -> the session whose read-only page it serves.
shares = Table(
    "shares",
    metadata,
    Column("token", String, primary_key=True),
    Column("session_id", String, nullable=False),
    Column("time_created", BigInteger, nullable=False),
    Index("ix_shares_session", "session_id"),
)

# Compaction snapshots: ``summary`` covers every message that entered the session at or before
# ``through_seq``; the model's context is the newest snapshot plus the messages after it. The
# (session_id, version) key makes concurrent writers conflict instead of overwriting each other.
snapshots = Table(
    "snapshots",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("version", BigInteger, primary_key=True),
    Column("through_seq", BigInteger, nullable=False),
    Column("message_id", String, nullable=False),
    Column("reason", String, nullable=False),
    Column("summary", Text, nullable=False),
    Column("time_created", BigInteger, nullable=False),
)

# A session's todo list (the todowrite tool), stored whole.
todos = Table(
    "todos",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("todos", Text, nullable=False),
)

# Permissions approved with "always": allow rules of a project that outlive the server.
saved_permissions = Table(
    "saved_permissions",
    metadata,
    Column("id", String, primary_key=True),
    Column("project_id", String, nullable=False),
    Column("permission", String, nullable=False),
    Column("pattern", String, nullable=False),
    Column("time_created", BigInteger, nullable=False),
    Index("ix_saved_permissions_project", "project_id"),
)

# A revert or unrevert under way (its journal): written before the first file moves, deleted in
# the transaction that records the outcome. While it exists the session takes no prompt, and the
# next start finishes it: ``journal`` says every file to restore and what the session's revert
# marker is to become.
reverts = Table(
    "reverts",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("journal", Text, nullable=False),
)

# The Idempotency-Key of each request that made a session (a create or a fork) or ran a user shell
# command (its reply is ``message_id``); nginx sends one per client request, the same on its
# retries. The request repeated with it answers what it made instead of doing it again.
# ``request`` says what was asked (``create`` and its arguments, ``fork <source> <message>``,
# ``shell <command>``): the key reused for another request is a conflict.
request_keys = Table(
    "request_keys",
    metadata,
    Column("request_key", String, primary_key=True),
    Column("session_id", String, nullable=False),
    Column("request", Text, nullable=False),
    Column("message_id", String, nullable=True),
    Index("ix_request_keys_session", "session_id"),
)

# What clients set on a project (``PATCH /project/:id``: ``name``, ``icon``, ``commands``), as
# ``info`` JSON, by project id. Everything else about a project (worktree, vcs, times) comes from
# the directories its sessions are in.
projects = Table(
    "projects",
    metadata,
    Column("id", String, primary_key=True),
    Column("info", Text, nullable=False),
    Column("time_updated", BigInteger, nullable=False),
)

# Each directory's project as a process whose machine has the directory resolved it: the others
# (on machines that lack the directory) list it from here rather than as ``global``.
project_places = Table(
    "project_places",
    metadata,
    Column("directory", String, primary_key=True),
    Column("project_id", String, nullable=False),
    Column("worktree", String, nullable=False),
    Column("vcs", String, nullable=True),
    Column("created", BigInteger, nullable=False),
)

# Terminals (databases shared by several processes): a pty lives in the process that started it;
# ``owner`` (its origin) and ``url`` (its advertised address) say where the others forward what
# concerns it, ``info`` is the pty as the owner last recorded it (what every process lists), and
# the owner keeps renewing ``expires_at`` (ms): once it stops, its ptys are gone everywhere.
pty_owners = Table(
    "pty_owners",
    metadata,
    Column("id", String, primary_key=True),
    Column("directory", String, nullable=False),
    Column("owner", String, nullable=False),
    Column("url", String, nullable=False),
    Column("info", Text, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Index("ix_pty_owners_directory", "directory", "id"),
)

# Provider credentials (``PUT /auth/:id``, the V2 integrations' keys) on a database several
# processes share, one row per provider: ``info`` is its ``Auth`` as JSON, as OpenCode's
# ``auth.json`` holds it. One process on its own keeps them in that file instead
# (app/providers/credentials.py).
credentials = Table(
    "credentials",
    metadata,
    Column("provider_id", String, primary_key=True),
    Column("info", Text, nullable=False),
)

# MCP servers added, connected or disconnected at run time (``POST /mcp``, ``/mcp/:name/connect``
# and ``/disconnect``) on a database several processes share: per directory and server name the
# latest change, ``config`` as JSON (NULL: as opencode.json configures the server) and ``enabled``;
# ``version`` orders the changes of the whole cluster. Kept until changed again, restarts included.
mcp_changes = Table(
    "mcp_changes",
    metadata,
    Column("directory", String, primary_key=True),
    Column("name", String, primary_key=True),
    Column("config", Text, nullable=True),
    Column("enabled", Boolean, nullable=False),
    Column("version", BigInteger, nullable=False),
)
