"""Reverts under way: a revert or unrevert records what it will restore before moving any file,
so a server killed in the middle finishes it at the next start, and the session takes no prompt
meanwhile.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reverts",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("journal", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reverts")
