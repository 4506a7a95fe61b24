"""What a keyed request made, besides its session: the reply of a user shell command
(``request_keys.message_id``). A shell command sent again with its Idempotency-Key (nginx passing
the POST to another replica after the first died mid-command) answers that reply instead of
running the command a second time.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("request_keys", sa.Column("message_id", sa.String, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_keys") as batch:
        batch.drop_column("message_id")
