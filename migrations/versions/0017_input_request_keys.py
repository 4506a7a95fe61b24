"""The key a prompt was admitted under (``inputs.request_key``), from the request's
``Idempotency-Key`` header: a request repeated with the same key (a client's retry, or nginx
passing a POST to another replica after the first died mid-request) finds the prompt already
admitted instead of admitting it twice. Unique per session; NULL for prompts sent without one.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("inputs", sa.Column("request_key", sa.String, nullable=True))
    op.create_index("ix_inputs_request_key", "inputs", ["session_id", "request_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_inputs_request_key", "inputs")
    op.drop_column("inputs", "request_key")
