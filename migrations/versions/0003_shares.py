"""Self-hosted sharing: an unguessable token names a shared session's read-only page.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shares",
        sa.Column("token", sa.String, primary_key=True),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_shares_session", "shares", ["session_id"])


def downgrade() -> None:
    op.drop_table("shares")
