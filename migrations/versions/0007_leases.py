"""Drain leases: on a database shared by several server processes, the process that drains a
session holds its lease (owner, a fencing token that grows with every new lease, an expiry it
keeps renewing). A process that dies stops renewing; another takes the session over.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
