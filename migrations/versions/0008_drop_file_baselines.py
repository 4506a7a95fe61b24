"""Drop file baselines: a session's file changes now come from the step snapshots (a shadow git
repository per project in the data directory), which also see what bash changed.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("file_baselines")


def downgrade() -> None:
    op.create_table(
        "file_baselines",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("path", sa.String, primary_key=True),
        sa.Column("content", sa.Text, nullable=True),
    )
