"""Placement across machines that do not share the project directories: a request that works on a
session's files (a revert, an unrevert, a user's shell command, a V2 revert's stage, clear or
commit) and lands on a process whose machine lacks the session's directory is served by a
process whose machine has it (``Runtime.placed_elsewhere``). Prompts need nothing of the kind:
their drains are placed through the database (``app/runtime/sessions/_cluster.py``, "Placement").

It forwards through the terminals' relay (``pty_forward.Forwarder``), with the same guarantees:
it sits inside authentication and the browser guard, passes the request's headers on (the other
process checks them again), forwards once (``x-opensession-forwarded``), only these paths with a
session id of the session shape, and only to the address a process announced for itself, never
one a client names. Where no process has the directory, the request is served here, as anywhere.
"""

from __future__ import annotations

import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import DATABASE_UNAVAILABLE
from app.api.middleware import refuse
from app.api.pty_forward import FORWARDED, Forwarder
from app.runtime.errors import DatabaseUnavailable
from app.runtime.service import Runtime

log = logging.getLogger("opensession.api.placement")

_ON_FILES = re.compile(
    r"^/session/(ses_[0-9A-Za-z]{1,64})/(?:revert|unrevert|shell)$"
    r"|^/api/session/(ses_[0-9A-Za-z]{1,64})/revert/(?:stage|clear|commit)$"
)


class SessionForwarding:
    def __init__(self, app: ASGIApp, forwarder: Forwarder, runtime: Runtime) -> None:
        self.app = app
        self.forwarder = forwarder
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        on_files = scope["type"] == "http" and scope["method"] == "POST" and _ON_FILES.match(scope["path"])
        if not on_files or any(name == FORWARDED.encode() for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        try:
            url = await self.runtime.placed_elsewhere(on_files.group(1) or on_files.group(2))
        except DatabaseUnavailable:
            await refuse(scope, send, 503, {"_tag": "DatabaseUnavailableError", "message": DATABASE_UNAVAILABLE})
            return
        if url is None:
            await self.app(scope, receive, send)
            return
        import httpx

        try:
            await self.forwarder.relay(scope, receive, send, url)
        except httpx.HTTPError as exc:
            log.warning("%s: the process at %s that has its directory did not answer: %r", scope["path"], url, exc)
            message = "The process whose machine has this session's directory did not answer; retry shortly"
            await refuse(scope, send, 503, {"_tag": "PlacementUnavailableError", "message": message})
