"""``opensession_claim(session, claimant, expires, at_ms)`` in each of its versions: under the
session's hold, its last seq, the lease's owner before (NULL: none), and the new token when the
lease was free, expired or already the claimant's (NULL: another live owner keeps it). The hold
orders the claim after every writer still committing under the old lease. Written once here;
each migration names the version it creates."""

from __future__ import annotations


def lease_claim(*, token_from_sequence: bool) -> str:
    """The function as migration 0013 made it (a token counted per lease row, from 1), or with
    ``token_from_sequence`` as 0021 does (every token new: ``opensession_lease_tokens``)."""
    first, next_ = (
        ("nextval('opensession_lease_tokens')", "excluded.token") if token_from_sequence else ("1", "l.token + 1")
    )
    return f"""
CREATE OR REPLACE FUNCTION opensession_claim(
    session text, claimant text, expires bigint, at_ms bigint,
    OUT last_seq bigint, OUT previous_owner text, OUT token bigint
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    last_seq := opensession_hold_session(session);
    SELECT l.owner INTO previous_owner FROM leases l WHERE l.session_id = session;
    INSERT INTO leases AS l (session_id, owner, token, expires_at) VALUES (session, claimant, {first}, expires)
    ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, token = {next_}, expires_at = excluded.expires_at
    WHERE l.owner = claimant OR l.expires_at < at_ms
    RETURNING l.token INTO token;
END
$$
"""
