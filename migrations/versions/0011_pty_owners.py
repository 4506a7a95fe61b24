"""Terminals on a database shared by several processes: which process owns each pty (its origin
and advertised URL, where the others forward requests for it), the pty as its owner last recorded
it, and an expiry the owner renews (a dead owner's ptys are gone everywhere once it passes).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pty_owners",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("directory", sa.String, nullable=False),
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("url", sa.String, nullable=False),
        sa.Column("info", sa.Text, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_pty_owners_directory", "pty_owners", ["directory", "id"])


def downgrade() -> None:
    op.drop_index("ix_pty_owners_directory", table_name="pty_owners")
    op.drop_table("pty_owners")
