"""State behind the agent's tools: todo lists, permissions saved with "always", and the content a
file had before a session's tools first changed it (for the session diff).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "todos",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("todos", sa.Text, nullable=False),
    )
    op.create_table(
        "saved_permissions",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("project_id", sa.String, nullable=False),
        sa.Column("permission", sa.String, nullable=False),
        sa.Column("pattern", sa.String, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_saved_permissions_project", "saved_permissions", ["project_id"])
    op.create_table(
        "file_baselines",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("path", sa.String, primary_key=True),
        sa.Column("content", sa.Text, nullable=True),
    )


def downgrade() -> None:
    for table in ("file_baselines", "saved_permissions", "todos"):
        op.drop_table(table)
