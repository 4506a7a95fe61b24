"""The Idempotency-Key of each request that created a session (``request_keys``): a create or a
fork repeated with its key (a client's retry, or nginx passing a POST to another replica after the
first died mid-request) answers the session the first one created instead of making a second.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_keys",
        sa.Column("request_key", sa.String, primary_key=True),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("request", sa.Text, nullable=False),
    )
    op.create_index("ix_request_keys_session", "request_keys", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_request_keys_session", table_name="request_keys")
    op.drop_table("request_keys")
