"""One round trip less per admission on PostgreSQL (a function only; SQLite needs none):
``opensession_write_head(session)`` also returns the held session's revert journal (the row of
``reverts``, NULL when no revert or unrevert is under way), read under the hold. An admission
checks it before it commits a staged revert, and used to read it in a round trip of its own.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from migrations.write_head import replace_with

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    replace_with(2)


def downgrade() -> None:
    replace_with(1)
