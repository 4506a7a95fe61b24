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


def write_head(added: int, *, create: str = "CREATE FUNCTION", numbered_after_hold: bool = False) -> str:
    """The function with the first ``added`` of ``ADDED`` (0: as migration 0012 made it).
    ``numbered_after_hold`` (0018): the transaction id is taken once the hold is granted, and not
    at all without a session (``NUMBERED``)."""
    outs = "".join(f", OUT {out}" for out, _ in ADDED[:added])
    reads = "".join(f"\n        {read}" for _, read in ADDED[:added])
    number = "first_cursor := pg_current_xact_id()::text::bigint << 20;"
    before, after = ("", f"\n        {number}") if numbered_after_hold else (f"\n    {number}", "")
    return f"""
{create} opensession_write_head(
    session text, OUT first_cursor bigint, OUT last_seq bigint, OUT lease_owner text, OUT lease_token bigint{outs}
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN{before}
    IF session <> '' THEN
        last_seq := opensession_hold_session(session);
        SELECT l.owner, l.token INTO lease_owner, lease_token FROM leases l WHERE l.session_id = session;{reads}{after}
    END IF;
END
$$
"""


# ``opensession_hold_numbered(session)`` (0018): a session's hold taken in the middle of a write
# transaction that has no transaction id yet, then its last seq, then the id (the transaction's
# events are numbered from it), so the ids of a session's writers ascend in the order of its hold.
NUMBERED = """
CREATE FUNCTION opensession_hold_numbered(session text, OUT last_seq bigint, OUT first_cursor bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    last_seq := opensession_hold_session(session);
    first_cursor := pg_current_xact_id()::text::bigint << 20;
END
$$
"""


def replace_with(added: int, *, numbered_after_hold: bool = False) -> None:
    """A migration step: the function as ``write_head(added)`` makes it, in place of the one there
    (dropped first, as its result type changes). PostgreSQL only: SQLite has no functions."""
    from alembic import op

    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION opensession_write_head(text)")
    op.execute(write_head(added, numbered_after_hold=numbered_after_hold))
