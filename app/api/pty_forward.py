"""Terminals in a cluster: a request for a pty another live process owns is sent to that process,
so a balancer may route any request anywhere and no terminal vanishes because of where a request
landed (``app/runtime/terminals/_placement.py`` records where each pty is).

``PtyForwarding`` sits inside authentication and the browser guard: what it forwards has passed
them here, and passes them again at the owner, with the same headers (``Authorization``,
``Origin``, ``Host``...). The owner answers, and its answer (a denied handshake too) is relayed
as it is. It forwards only:
- requests for one pty (``/pty/<id>``, ``/connect``, ``/connect-token``, and the ``/api``
  ones), with an id of the pty shape, so no path a client chooses is sent anywhere;
- to the URL the owner itself registered in the database while it lives (never one a client
  names: no SSRF);
- once: a forwarded request carries ``x-opensession-forwarded`` and is answered where it arrives.
An owner that cannot be connected to is gone (its pty with it): 404, as after its rows expire.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import DATABASE_UNAVAILABLE
from app.api.middleware import refuse, refuse_unavailable
from app.runtime.errors import DatabaseUnavailable
from app.runtime.terminals import Elsewhere, Terminals

log = logging.getLogger("opensession.api.pty")

FORWARDED = "x-opensession-forwarded"
_ONE_PTY = re.compile(r"^(?:/api)?/pty/(pty_[0-9A-Za-z]{1,64})(?:/connect|/connect-token)?$")
# Not passed on: hop-by-hop headers, and what the HTTP client or the WebSocket handshake sets.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "accept-encoding",
    }
)
_HANDSHAKE = frozenset({"host", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"})
# Not relayed back: what this server's own layers (uvicorn, CORS) add to every answer.
_OWN = frozenset({"content-encoding", "date", "server", "vary"})
TIMEOUT_S = 60.0  # a removal waits for the pty's processes to end (a grace period, then SIGKILL)


def _not_found(pty_id: str, message: str) -> dict[str, Any]:
    return {"_tag": "PtyNotFoundError", "message": message, "ptyID": pty_id}


class Forwarder:
    """Where requests for ptys held elsewhere go, and the HTTP client that takes them there
    (made on first use: most servers never forward; closed with the app)."""

    def __init__(self, terminals: Terminals) -> None:
        self.terminals = terminals
        self._client: Any = None  # httpx.AsyncClient

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def relay(self, scope: Scope, receive: Receive, send: Send, base_url: str) -> None:
        """Send the request to the process at ``base_url`` and relay its answer as it is; raises
        ``httpx.HTTPError`` (nothing sent to the client yet) when that process does not answer."""
        await self.relay_body(scope, await read_body(receive), send, base_url)

    async def relay_body(self, scope: Scope, body: bytes, send: Send, base_url: str) -> None:
        """``relay``, the request's body read already."""
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(TIMEOUT_S, connect=5.0))
        query = scope.get("query_string", b"").decode("latin-1")
        url = base_url + scope["path"] + (f"?{query}" if query else "")
        answer = await self._client.request(scope["method"], url, content=body, headers=_passed(scope))
        headers = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in answer.headers.multi_items()
            if not _not_relayed(name)
        ]
        headers.append((b"content-length", str(len(answer.content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": answer.content})


class _Unreachable(Exception):
    """Nothing answered at the owner's URL (it stopped or died)."""


Forward = Callable[[Elsewhere], Awaitable[None]]  # sends the request to a pty's owner, or raises _Unreachable


class PtyForwarding:
    def __init__(self, app: ASGIApp, forwarder: Forwarder) -> None:
        self.app = app
        self.forwarder = forwarder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _ONE_PTY.match(scope["path"]) if scope["type"] in ("http", "websocket") else None
        if match is None or any(name == FORWARDED.encode() for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        try:
            where = await self.forwarder.terminals.elsewhere(match.group(1))
        except DatabaseUnavailable:
            await refuse_database_away(scope, send)
            return
        if where is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            body = await read_body(receive)
            receive = replaying(body, receive)

            async def forward(to: Elsewhere) -> None:
                await self._http(scope, body, send, to)

        else:

            async def forward(to: Elsewhere) -> None:
                await _websocket(scope, receive, send, to)

        await self._to_owner(scope, receive, send, where, forward)

    async def _to_owner(self, scope: Scope, receive: Receive, send: Send, where: Elsewhere, forward: Forward) -> None:
        """Forward to the owner; if nothing answers there, to the process that took the pty up
        since (a stopped or dead owner leaves it to its keeper, ``Terminals.successor``), or
        serve it here (taken up here, or by nobody: the route answers)."""
        try:
            await forward(where)
            return
        except _Unreachable:
            successor = await self.forwarder.terminals.successor(where)
        if successor is None:
            await self.app(scope, receive, send)
            return
        try:
            await forward(successor)
        except _Unreachable:
            await refuse(scope, send, 404, _not_found(where.pty_id, f"PTY session not found: {where.pty_id}"))

    async def _http(self, scope: Scope, body: bytes, send: Send, where: Elsewhere) -> None:
        import httpx

        try:
            await self.forwarder.relay_body(scope, body, send, where.url)
        except httpx.ConnectError as exc:
            log.warning("pty %s: its owner %s at %s is not reachable: %r", where.pty_id, where.owner, where.url, exc)
            raise _Unreachable from exc
        except httpx.HTTPError as exc:
            log.warning("pty %s: forwarding to %s failed: %r", where.pty_id, where.url, exc)
            message = f"The process that holds PTY session {where.pty_id} did not answer; retry shortly"
            await refuse_unavailable(scope, send, "PtyOwnerUnavailableError", "pty", message)


async def refuse_database_away(scope: Scope, send: Send) -> None:
    """The 503 for a forwarding decision the database could not answer."""
    await refuse_unavailable(scope, send, "DatabaseUnavailableError", "database", DATABASE_UNAVAILABLE)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` again (read from ``receive`` already, to be forwarded),
    then what ``receive`` gives next (the client's disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


def _not_relayed(name: str) -> bool:
    name = name.lower()
    return name in _HOP or name in _OWN or name.startswith("access-control-")


def _passed(scope: Scope, leave_out: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """The request's end-to-end headers (``Host`` included: the owner checks it as this process
    did), marked as forwarded."""
    headers = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in scope["headers"]
        if name.decode("latin-1").lower() not in _HOP | leave_out
    ]
    return [*headers, (FORWARDED, "1")]


async def read_body(receive: Receive) -> bytes:
    """The whole request body (BodyLimit, outside, has bounded it)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _websocket(scope: Scope, receive: Receive, send: Send, where: Elsewhere) -> None:
    """Open the same WebSocket at the owner, then relay frames both ways until either side
    closes; the owner's close code is passed on, so is a refused handshake (status and body)."""
    from websockets import ConnectionClosed, InvalidStatus
    from websockets.asyncio.client import connect

    owner = urlsplit(where.url)
    host = dict(scope["headers"]).get(b"host", b"").decode("latin-1") or owner.netloc
    query = scope.get("query_string", b"").decode("latin-1")
    secure = owner.scheme == "https"
    # The URL names the client's Host (the handshake's Host header); the connection goes to the owner.
    uri = f"{'wss' if secure else 'ws'}://{host}{scope['path']}" + (f"?{query}" if query else "")
    tls: dict[str, Any] = {"server_hostname": owner.hostname} if secure else {}
    try:
        upstream = await connect(
            uri,
            host=owner.hostname,
            port=owner.port or (443 if secure else 80),
            additional_headers=_passed(scope, _HANDSHAKE),
            user_agent_header=None,
            proxy=None,
            compression=None,
            max_size=None,
            open_timeout=10,
            **tls,
        )
    except InvalidStatus as refused:
        response = refused.response
        content_type = response.headers.get("content-type", "application/json")
        await _deny(scope, send, response.status_code, bytes(response.body or b""), content_type)
        return
    except (OSError, TimeoutError) as exc:
        log.warning("pty %s: its owner at %s is not reachable: %r", where.pty_id, where.url, exc)
        raise _Unreachable from exc
    first = await receive()
    if first["type"] != "websocket.connect":
        await upstream.close()
        return
    await send({"type": "websocket.accept"})

    async def to_client() -> None:
        with suppress(ConnectionClosed):
            async for frame in upstream:
                key = "text" if isinstance(frame, str) else "bytes"
                await send({"type": "websocket.send", key: frame})
        code = upstream.close_code if upstream.close_code not in (None, 1005, 1006) else 1011
        with suppress(RuntimeError, OSError):  # the client left first
            await send({"type": "websocket.close", "code": code})

    async def to_owner() -> None:
        with suppress(ConnectionClosed):
            while True:
                message: Message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
                if data is not None:
                    await upstream.send(data)
        await upstream.close()  # the client left: so does the connection to the owner

    feeding = asyncio.create_task(to_owner())
    try:
        await to_client()  # until the owner's side closes (the owner closed it, or to_owner did)
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)
        await upstream.close()


async def _deny(scope: Scope, send: Send, status: int, body: bytes, content_type: str) -> None:
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", content_type.encode("latin-1")), (b"content-length", str(len(body)).encode())]
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
