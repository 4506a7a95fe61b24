"""The held session's lease expiry from the write head (a function only; SQLite needs none):
``opensession_write_head(session)`` also returns when the held session's lease expires. An
admission on a process that does not drain the session sees that another process drains it
now (a live lease), and leaves the prompt to that drain, which reads what was admitted before
it gives the lease up; it used to claim the lease to find that out, a round trip, and then wake
the owner, another.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from migrations.write_head import replace_with

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    replace_with(3)


def downgrade() -> None:
    replace_with(2)
