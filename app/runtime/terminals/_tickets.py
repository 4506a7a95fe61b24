"""Connect tickets: a browser cannot put credentials on a WebSocket handshake, so it first asks
(with credentials) for a ticket and puts that in the connect URL. A ticket opens one connection
to one pty of one directory, once, within ``TICKET_SECONDS`` (OpenCode's 60)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

TICKET_SECONDS = 60


@dataclass(frozen=True, slots=True)
class _Grant:
    pty_id: str
    directory: str
    expires: float


class Tickets:
    def __init__(self) -> None:
        self._grants: dict[str, _Grant] = {}

    def issue(self, pty_id: str, directory: str) -> dict[str, object]:
        now = time.monotonic()
        self._grants = {t: g for t, g in self._grants.items() if g.expires > now}
        ticket = str(uuid.uuid4())
        self._grants[ticket] = _Grant(pty_id, directory, now + TICKET_SECONDS)
        return {"ticket": ticket, "expires_in": TICKET_SECONDS}

    def consume(self, ticket: str, pty_id: str, directory: str) -> bool:
        """Whether ``ticket`` grants this connection; a ticket is spent by any attempt to use it."""
        grant = self._grants.pop(ticket, None)
        return (
            grant is not None
            and grant.expires > time.monotonic()
            and (grant.pty_id, grant.directory) == (pty_id, directory)
        )
