"""Concurrent writers on PostgreSQL: the functions a write transaction calls in place of the
cluster-wide writer lock (SQLite has one writer and needs none of them).

- ``opensession_hold_session(session)``: waits for, and holds to the end of the transaction, the
  session's advisory lock (the same key ``WriteScope.hold`` takes), then reads the session's last
  seq. In PL/pgSQL each statement of a volatile function takes a new snapshot, so the read sees
  every transaction that held the lock before: a session's seq stays gap-free and in commit order.
- ``opensession_write_head(session)``: what a write transaction reads first, in one round trip:
  where its cursors start (its transaction id, shifted: see ``app.events.log``) and, for the
  session it drains (``''``: none), the hold, the last seq and the lease, read after the hold.
- ``opensession_settled()``: the cursor below which no transaction can still add an event (the
  oldest running transaction id of the current snapshot, shifted the same way).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from alembic import op

from migrations.write_head import write_head

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

HOLD_SESSION = """
CREATE OR REPLACE FUNCTION opensession_hold_session(session text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1869636974, hashtext(session));
    RETURN coalesce((SELECT max(e.seq) FROM events e WHERE e.session_id = session), -1);
END
$$
"""

WRITE_HEAD = write_head(0, create="CREATE OR REPLACE FUNCTION")

SETTLED = """
CREATE OR REPLACE FUNCTION opensession_settled() RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 20 $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for function in (HOLD_SESSION, WRITE_HEAD, SETTLED):
        op.execute(function)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")
    op.execute("DROP FUNCTION opensession_hold_session(text)")
    op.execute("DROP FUNCTION opensession_settled()")
