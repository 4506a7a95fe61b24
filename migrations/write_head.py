"""``opensession_write_head(session)``, the first statement of a write transaction on PostgreSQL,
in each of its versions: where the transaction's cursors start (its transaction id, shifted:
``app.events.log``) and, for the session it holds (``''``: none), the hold, the last seq and the
lease, then what later versions also read under the hold, in one round trip. Written once here;
each migration names the version it creates."""

from __future__ import annotations

# What each later version reads too: (its OUT parameter, the statement that reads it).
ADDED = [
    ("session_info text", "SELECT s.info INTO session_info FROM sessions s WHERE s.id = session;"),  # 0013
    (
        "revert_journal text",
        "SELECT r.journal INTO revert_journal FROM reverts r WHERE r.session_id = session;",
    ),  # 0014
    (
        "lease_expires bigint",
        "SELECT l.expires_at INTO lease_expires FROM leases l WHERE l.session_id = session;",
    ),  # 0015
]


def write_head(added: int, *, create: str = "CREATE FUNCTION") -> str:
    """The function with the first ``added`` of ``ADDED`` (0: as migration 0012 made it)."""
    outs = "".join(f", OUT {out}" for out, _ in ADDED[:added])
    reads = "".join(f"\n        {read}" for _, read in ADDED[:added])
    return f"""
{create} opensession_write_head(
    session text, OUT first_cursor bigint, OUT last_seq bigint, OUT lease_owner text, OUT lease_token bigint{outs}
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    first_cursor := pg_current_xact_id()::text::bigint << 20;
    IF session <> '' THEN
        last_seq := opensession_hold_session(session);
        SELECT l.owner, l.token INTO lease_owner, lease_token FROM leases l WHERE l.session_id = session;{reads}
    END IF;
END
$$
"""


def replace_with(added: int) -> None:
    """A migration step: the function as ``write_head(added)`` makes it, in place of the one there
    (dropped first, as its result type changes). PostgreSQL only: SQLite has no functions."""
    from alembic import op

    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")
    op.execute(write_head(added))
