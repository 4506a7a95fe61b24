"""Where each directory's project was resolved (``project_places``): its id, worktree, vcs and
creation time as a process whose machine has the directory saw them. A process whose machine
lacks the directory (processes on machines that do not share the project directories) lists
the project from here instead of calling it ``global``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_places",
        sa.Column("directory", sa.String, primary_key=True),
        sa.Column("project_id", sa.String, nullable=False),
        sa.Column("worktree", sa.String, nullable=False),
        sa.Column("vcs", sa.String, nullable=True),
        sa.Column("created", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("project_places")
