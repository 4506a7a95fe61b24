"""Initial schema: sessions, messages, parts, inputs (admission queue), events (durable log).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_cursor = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("directory", sa.String, nullable=False),
        sa.Column("parent_id", sa.String, nullable=True),
        sa.Column("title", sa.String, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
        sa.Column("time_updated", sa.BigInteger, nullable=False),
        sa.Column("info", sa.Text, nullable=False),
    )
    op.create_index("ix_sessions_directory_updated", "sessions", ["directory", "time_updated"])
    op.create_index("ix_sessions_parent", "sessions", ["parent_id"])
    op.create_table(
        "messages",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
        sa.Column("info", sa.Text, nullable=False),
    )
    op.create_index("ix_messages_session_id", "messages", ["session_id", "id"])
    op.create_table(
        "parts",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("message_id", sa.String, nullable=False),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_parts_message_id", "parts", ["message_id", "id"])
    op.create_index("ix_parts_session", "parts", ["session_id"])
    op.create_table(
        "inputs",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("delivery", sa.String, nullable=False),
        sa.Column("admitted_seq", sa.BigInteger, nullable=False),
        sa.Column("promoted_seq", sa.BigInteger, nullable=True),
        sa.Column("completed", sa.Boolean, nullable=False),
        sa.Column("time_created", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_inputs_pending", "inputs", ["session_id", "completed", "admitted_seq"])
    op.create_table(
        "events",
        sa.Column("id", _cursor, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String, nullable=False, unique=True),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("directory", sa.String, nullable=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("type", sa.String, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("time", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
    )


def downgrade() -> None:
    for table in ("events", "inputs", "parts", "messages", "sessions"):
        op.drop_table(table)
