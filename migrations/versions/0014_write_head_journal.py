"""One round trip less per admission on PostgreSQL (a function only; SQLite needs none):
``opensession_write_head(session)`` also returns the held session's revert journal (the row of
``reverts``, NULL when no revert or unrevert is under way), read under the hold. An admission
checks it before it commits a staged revert, and used to read it in a round trip of its own.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from alembic import op

from migrations.write_head import write_head

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")  # its result type changes
    op.execute(write_head(2))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")
    op.execute(write_head(1))
