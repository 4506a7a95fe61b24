"""A write transaction on PostgreSQL takes its transaction id once it holds the session it
writes, not before. Its events are numbered (``cursor``) from that id, and every process
publishes the log in cursor order; a session's ``seq`` follows the order of its hold. An id
taken before the hold let a transaction that had to wait for the hold (an admission queued behind
a drain's step) be numbered before a transaction that got the hold first, so a session's events
reached the streams out of ``seq`` order (seen under load with PostgreSQL restarting).

``opensession_write_head(session)`` now takes the id after the hold (and none when no session
is held at the start); a hold taken later in the transaction takes it through
``opensession_hold_numbered(session)`` when the transaction has none yet. A transaction that
holds no session writes no event, and takes no id before its writes: if the answer to its
COMMIT is lost, it is reported lost, as its writer cannot look it up (``app/store/postgres.py``, ``commit``).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from alembic import op

from migrations.write_head import NUMBERED, replace_with

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    replace_with(3, numbered_after_hold=True)
    op.execute(NUMBERED)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_hold_numbered(text)")
    replace_with(3)
