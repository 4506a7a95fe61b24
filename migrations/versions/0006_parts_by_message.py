"""Parts are looked up by (session, message, id): a page of messages fetches its parts with one
index range scan, whatever the session's length (the old (session) index read every part of the
session and sorted them).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_parts_session", "parts")
    op.create_index("ix_parts_session", "parts", ["session_id", "message_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_parts_session", "parts")
    op.create_index("ix_parts_session", "parts", ["session_id"])
