"""Pure-ASGI middleware (cheaper than BaseHTTPMiddleware on every request): a request body size
limit, optional HTTP basic auth as OpenCode's ``OPENCODE_SERVER_PASSWORD`` provides (on
WebSocket handshakes too), and the answer of a request that a stopping server gives up on.
``app.api.browser`` holds the guard against web pages."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import secrets
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import unavailable_body
from app.jsonutil import dumpb
from app.observability import logs


def _json_headers(payload: bytes, extra: list[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *(extra or [])]


async def _reply(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = dumpb(body)
    await send({"type": "http.response.start", "status": status, "headers": _json_headers(payload, headers)})
    await send({"type": "http.response.body", "body": payload})


def too_large(limit: int) -> dict[str, Any]:
    return {"name": "BadRequest", "data": {"message": f"Request body exceeds {limit} bytes", "kind": "Payload"}}


# What a stopping server cancels the requests still running with once its graceful time is up.
GIVEN_UP = "the graceful shutdown's time is up"
STOPPING = (
    "The server stopped before this request was done. What it admitted is kept, and another "
    "process answers it: send the request again (with the same Idempotency-Key)."
)


class StopAnswer:
    """A request that a stopping server cancels (``GIVEN_UP``: a synchronous prompt still waiting
    for its reply, say) is answered 503 (``ServerStoppingError``; on V2, ``ServiceUnavailableError``
    of the service ``server``), which a client may retry, instead of the bare 500 uvicorn gives a
    cancelled request; one whose answer had begun is cut off."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError as exc:
            if started or exc.args != (GIVEN_UP,):
                raise
            body = unavailable_body(scope["path"], "ServerStoppingError", "server", STOPPING)
            await _reply(send, 503, body, [(b"retry-after", b"1")])  # the task ends: the server stops


class BodyLimit:
    """Refuses bodies over ``limit`` bytes with 413 before any route sees them. A route in
    ``streamed`` (path: its own limit) reads its body as a stream and holds to that limit itself:
    a declared length over it is refused here, a chunked body is passed on, not buffered."""

    def __init__(self, app: ASGIApp, limit: int, streamed: dict[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.streamed = streamed or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.streamed.get(scope["path"], self.limit)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await _reply(send, 413, too_large(limit))
                return
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.streamed:
            await self.app(scope, receive, send)
            return
        # No declared length (chunked): buffer up to the limit, then replay to the app.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await _reply(send, 413, too_large(self.limit))
                return
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


_SESSION_PATH = re.compile(r"^/(?:api/)?session/(ses_[A-Za-z0-9]+)")


class RequestContext:
    """Gives each request its id (the caller's ``x-request-id`` or ``traceparent``, else a new
    one), answered in ``x-request-id``, and puts it, the session the path names and the
    directory the request is scoped to into the log's context (app/observability/logs.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        incoming, parent = headers.get(b"x-request-id"), headers.get(b"traceparent")
        rid = logs.request_id(
            incoming.decode("latin-1") if incoming else None, parent.decode("latin-1") if parent else None
        )
        logs.REQUEST_ID.set(rid)
        session = _SESSION_PATH.match(scope["path"])
        logs.SESSION_ID.set(session.group(1) if session else None)
        directory = headers.get(b"x-opencode-directory")
        query = scope.get("query_string", b"")
        if b"directory=" in query:
            directory = (parse_qs(query.decode("latin-1")).get("directory") or [""])[0].encode()
        logs.DIRECTORY.set(directory.decode("utf-8", "replace") if directory else None)
        header = (b"x-request-id", rid.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


_PTY_CONNECT = re.compile(r"^(/api)?/pty/[^/]+/connect$")


def _ticketed_connect(scope: Scope) -> bool:
    """A terminal WebSocket that carries a connect ticket: browsers cannot put credentials on a
    WebSocket handshake, so (as in OpenCode) the route checks the ticket, which was handed out
    to an authenticated request."""
    return bool(_PTY_CONNECT.match(scope["path"])) and "ticket" in parse_qs(scope.get("query_string", b"").decode())


_SHARE_PAGE = re.compile(r"^/share/[A-Za-z0-9_-]+(/(data|transcript|event))?$")


def is_public(scope: Scope) -> bool:
    """A shared session's page and its data: the unguessable share token is the credential (the
    point of sharing is that whoever has the link reads it without the server's password)."""
    return scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and bool(_SHARE_PAGE.match(scope["path"]))


class BasicAuth:
    """Guards HTTP requests and WebSocket handshakes alike (a terminal is a shell); CORS
    preflights and shared pages pass (see ``is_public``)."""

    def __init__(self, app: ASGIApp, username: str, password: str, probes: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.expected = f"{username}:{password}".encode()
        self.probes = probes  # health probes: a load balancer asks without credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or is_public(scope)
            or (scope["path"] in self.probes and scope.get("method") in ("GET", "HEAD"))
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        await refuse(scope, send, 401, _UNAUTHORIZED, [(b"www-authenticate", b'Basic realm="opensession"')])

    def _authorized(self, scope: Scope) -> bool:
        if scope["type"] == "websocket" and _ticketed_connect(scope):
            return True
        header = dict(scope["headers"]).get(b"authorization", b"")
        supplied = b""
        if header[:6].lower() == b"basic ":
            try:
                supplied = base64.b64decode(header[6:], validate=True)
            except (binascii.Error, ValueError):
                supplied = b""
        return secrets.compare_digest(supplied, self.expected)


_UNAUTHORIZED = {"name": "UnauthorizedError", "data": {"message": "Unauthorized"}}


async def refuse_unavailable(scope: Scope, send: Send, name: str, service: str, message: str) -> None:
    """A 503 in the words of the route (``errors.unavailable_body``)."""
    await refuse(scope, send, 503, unavailable_body(scope["path"], name, service, message))


async def refuse(
    scope: Scope, send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An error answer to an HTTP request or a WebSocket handshake (a bare close where the server
    cannot answer a handshake with a status)."""
    if scope["type"] == "http":
        await _reply(send, status, body, headers)
        return
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    payload = dumpb(body)
    start = {"type": "websocket.http.response.start", "status": status, "headers": _json_headers(payload, headers)}
    await send(start)
    await send({"type": "websocket.http.response.body", "body": payload})
