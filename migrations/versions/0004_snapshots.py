"""Compaction snapshots: a summary of a session's history up to a log position, versioned so a
stale writer gets a conflict instead of overwriting a newer summary.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("version", sa.BigInteger, primary_key=True),
        sa.Column("through_seq", sa.BigInteger, nullable=False),
        sa.Column("message_id", sa.String, nullable=False),
        sa.Column("reason", sa.String, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("snapshots")
