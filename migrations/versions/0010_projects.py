"""Project settings clients edit (PATCH /project/:id: name, icon, commands): the OpenCode web
app gives every project an icon colour and asks again on every load until one is kept.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("info", sa.Text, nullable=False),
        sa.Column("time_updated", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("projects")
