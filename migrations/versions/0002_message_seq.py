"""Messages remember the log position at which they entered the session (``seq``), so the model's
context and V2 listings follow promotion order even when a steered prompt overtakes queued ones
(message ids follow admission order).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("seq", sa.BigInteger, nullable=True))
    # The message id inside the stored event JSON, in each engine's JSON syntax.
    if op.get_bind().dialect.name == "postgresql":
        message_id = "(events.data::json #>> '{info,id}')"
    else:
        message_id = "json_extract(events.data, '$.info.id')"
    op.execute(
        "UPDATE messages SET seq = (SELECT min(events.seq) FROM events WHERE events.session_id = messages.session_id "
        f"AND events.type = 'message.updated' AND {message_id} = messages.id)"
    )
    op.execute("UPDATE messages SET seq = 0 WHERE seq IS NULL")
    with op.batch_alter_table("messages") as batch:
        batch.alter_column("seq", existing_type=sa.BigInteger, nullable=False)
    op.create_index("ix_messages_session_seq", "messages", ["session_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_messages_session_seq", "messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("seq")
