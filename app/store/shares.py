"""The ``shares`` table: the token each shared session is reachable by (``GET /share/<token>``)."""

from __future__ import annotations

from app.store import sql
from app.store.database import WriteScope


def insert(scope: WriteScope, token: str, session_id: str, time_created: int) -> None:
    scope.execute(sql.INSERT_SHARE, {"token": token, "session_id": session_id, "time_created": time_created})


def revoke(scope: WriteScope, session_id: str) -> None:
    """Drop every share of the session."""
    scope.execute(sql.DELETE_SESSION_ROWS["shares"], {"session_id": session_id})
