"""Lease tokens from one sequence, so no token is ever handed out twice.

A drain fences every write with its lease's owner and token. Tokens grew only while a lease's row
lived: a released lease's row is deleted, and the next reservation or claim began again at 1. A
drain that had lost its lease (stalled past it while another process answered its prompt and gave
the lease up) passed the fence again once its own process reserved the session for a new prompt
under the same token, and wrote the step it had read before the stall: a prompt answered twice.
Now every reservation and claim takes the next value of ``opensession_lease_tokens``.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from alembic import op

from migrations.lease_claim import lease_claim

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE SEQUENCE opensession_lease_tokens")
    # Past every token a lease now holds: a drain running across the upgrade keeps its fence.
    op.execute("SELECT setval('opensession_lease_tokens', coalesce((SELECT max(token) FROM leases), 0) + 1, false)")
    op.execute(lease_claim(token_from_sequence=True))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(lease_claim(token_from_sequence=False))
    op.execute("DROP SEQUENCE opensession_lease_tokens")
