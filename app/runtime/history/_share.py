"""Self-hosted sharing. Sharing gives a session ``share.url`` on this server, an unguessable
token that serves a read-only page of the transcript (and its JSON); unsharing revokes the token,
after which the page is gone (404) and the streams it opened end (``revokes``): a token is the
credential, so nothing reaches its readers after it is revoked, and a new share is a new token
that revives no old reader."""

from __future__ import annotations

import secrets

from app.clock import now_ms
from app.events.log import EventLog
from app.events.model import Event
from app.runtime.errors import ShareNotFound
from app.runtime.history._service import History
from app.store import shares
from app.wire import MessageWithParts, Session


class Shares:
    def __init__(self, log: EventLog, history: History) -> None:
        self.log = log
        self.history = history
        self.sessions = history.sessions

    async def share(self, session_id: str, base_url: str) -> Session:
        """Share the session (idempotent: an already shared session keeps its url). Looked at
        inside the write transaction, so concurrent shares make one token, the one every answer
        names: no token the owner was never shown stays readable after an unshare."""
        token = secrets.token_urlsafe(24)
        url = f"{base_url.rstrip('/')}/share/{token}"
        async with self.log.transaction() as tx:
            session = await self.sessions.current(tx, session_id)
            if session.get("share"):
                return session
            shares.insert(tx.scope, token, session_id, now_ms())
            return await self.sessions.mutate(tx, session_id, lambda info: info.__setitem__("share", {"url": url}))

    async def unshare(self, session_id: str) -> Session:
        await self.sessions.get(session_id)
        async with self.log.transaction() as tx:
            shares.revoke(tx.scope, session_id)
            return await self.sessions.mutate(tx, session_id, lambda info: info.pop("share", None))

    @staticmethod
    def revokes(event: Event) -> bool:
        """Whether ``event`` (one of the shared session's) revokes its share: the session unshared
        or deleted. Sharing again is only possible after unsharing (a shared session keeps its
        url), so every token a stream may hold is revoked by one of these."""
        if event.type == "session.deleted":
            return True
        return event.type == "session.updated" and "share" not in event.properties.get("info", {})

    async def serves(self, token: str, session_id: str) -> bool:
        """Whether ``token`` still shares ``session_id``."""
        return await self.history.queries.shared_session(token) == session_id

    async def shared(self, token: str) -> tuple[Session, list[MessageWithParts]]:
        """The session and transcript a token serves; ShareNotFound once revoked."""
        session_id = await self.history.queries.shared_session(token)
        if session_id is None:
            raise ShareNotFound(token)
        return await self.sessions.get(session_id), await self.history.get_messages(session_id)
