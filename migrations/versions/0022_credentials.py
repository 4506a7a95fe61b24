"""Provider credentials in the database (``credentials``) when several processes share it: a key
saved through one process was only in that process's ``auth.json``, so the turns the others drained
went without it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "credentials",
        sa.Column("provider_id", sa.String, primary_key=True),
        sa.Column("info", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("credentials")
