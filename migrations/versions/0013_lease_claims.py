"""Fewer round trips on PostgreSQL (functions only; SQLite needs none of them):

- ``opensession_write_head(session)`` also returns the held session's info, read under the hold:
  the transactions that hold a session mostly change it next (a read of its own before).

Lease claims and releases as one statement each, so each is a transaction of its own in one round
trip, where a transaction of separate statements took four:

- ``opensession_claim(session, claimant, expires, at_ms)``: under the session's hold, its last seq,
  the lease's owner before (NULL: none), and the new token when the lease was free, expired or
  already the claimant's (NULL: another live owner keeps it). The hold orders the claim after
  every writer still committing under the old lease, as before.
- ``opensession_release(session, owner, token, admitted_after)``: under the session's hold, drop
  the lease if it is still ``owner``'s under ``token`` and no input admitted after the seq
  ``admitted_after`` is unsettled (NULL: release regardless); true when released. An admission
  holds the session too, so none slips in between the check and the delete.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from alembic import op

from migrations.lease_claim import lease_claim
from migrations.write_head import write_head

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


CLAIM = lease_claim(token_from_sequence=False)

RELEASE = """
CREATE OR REPLACE FUNCTION opensession_release(session text, holder text, held_token bigint, admitted_after bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1869636974, hashtext(session));
    IF admitted_after IS NOT NULL AND EXISTS (
        SELECT 1 FROM inputs i
        WHERE i.session_id = session AND i.completed IS false AND i.admitted_seq > admitted_after
    ) THEN
        RETURN false;
    END IF;
    DELETE FROM leases l WHERE l.session_id = session AND l.owner = holder AND l.token = held_token;
    RETURN true;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")  # its result type changes
    op.execute(write_head(1))
    op.execute(CLAIM)
    op.execute(RELEASE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_release(text, text, bigint, bigint)")
    op.execute("DROP FUNCTION opensession_claim(text, text, bigint, bigint)")
    op.execute("DROP FUNCTION opensession_write_head(text)")
    op.execute(write_head(0))
