"""MCP servers changed at run time, in the database when several processes share it
(``mcp_changes``): ``POST /mcp`` and a server's connect or disconnect changed only the process
that took the request, so the turns the others drained had other tools, and a client's next
status read, landing elsewhere, showed the change undone.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_changes",
        sa.Column("directory", sa.String, primary_key=True),
        sa.Column("name", sa.String, primary_key=True),
        sa.Column("config", sa.Text, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mcp_changes")
