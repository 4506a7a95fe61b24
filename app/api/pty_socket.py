"""The terminal WebSocket shared by ``/pty/{id}/connect`` and ``/api/pty/{id}/connect`` (its
routes, connect-ticket checks and relay), in OpenCode's wire format: replayed output as text frames, then one binary
control frame (``0x00`` + ``{"cursor": N}``), then live output as text frames; text or binary
frames from the client are the terminal's input. The process exiting or the pty being removed
closes the socket (1000); the client closing it leaves the terminal running."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

from fastapi import APIRouter
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.api.deps import DirectoryDep, PtyIDPath, TerminalsDep
from app.api.errors import tagged
from app.jsonutil import dumpb
from app.runtime.errors import InvalidInput, TerminalForbidden, TerminalNotFound
from app.runtime.terminals import Subscription, Terminal, Terminals

log = logging.getLogger("opensession.api.pty")

REPLAY_CHUNK = 64 * 1024  # characters per replayed text frame, as OpenCode sends them
TICKET_HEADER, TICKET_HEADER_VALUE = "x-opencode-ticket", "1"
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "tauri.localhost"}


def parse_cursor(value: str | None) -> int | None:
    """OpenCode's rule: an integer of at least -1; anything else counts as no cursor."""
    try:
        cursor = int(value) if value is not None else None
    except ValueError:
        return None
    return cursor if cursor is not None and cursor >= -1 else None


def _trusted_origin(origin: str | None, host: str | None) -> bool:
    """No origin (not a browser), the server's own origin, a loopback page, the desktop app
    (tauri) or OpenCode's web app, as the reference server accepts them."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    hostname = parts.hostname or ""
    if parts.scheme == "tauri":
        return hostname == "localhost"
    if parts.scheme not in ("http", "https"):
        return False
    return parts.netloc == host or hostname in _LOCAL_HOSTS or hostname.endswith(".opencode.ai")


def check_ticket_request(connection: HTTPConnection) -> None:
    """A ticket is only handed to a client that asks for one explicitly, from a trusted page."""
    headers = connection.headers
    if headers.get(TICKET_HEADER) != TICKET_HEADER_VALUE or not _trusted_origin(
        headers.get("origin"), headers.get("host")
    ):
        raise TerminalForbidden("Invalid PTY connect token request")


async def _deny(websocket: WebSocket, response: Response) -> None:
    """Refuse the handshake with an HTTP answer (a bare close where the server cannot)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=1008)


def add_connect_routes(router: APIRouter, *, operation_id: str) -> None:
    """``/pty/{ptyID}/connect`` on ``router``: the WebSocket, and a plain GET that is not an
    upgrade (404 for an unknown pty, else 400), which also documents the route."""

    @router.get("/pty/{ptyID}/connect", operation_id=operation_id, summary="Connect to PTY session (WebSocket)")
    async def connect_without_upgrade(terminals: TerminalsDep, directory: DirectoryDep, ptyID: PtyIDPath) -> Response:
        terminals.terminal(directory, ptyID)
        raise InvalidInput("Expected a WebSocket upgrade request", kind="Headers")

    @router.websocket("/pty/{ptyID}/connect")
    async def connect(
        websocket: WebSocket,
        terminals: TerminalsDep,
        directory: DirectoryDep,
        ptyID: str,
        cursor: str | None = None,
        ticket: str | None = None,
    ) -> None:
        await serve(websocket, terminals, directory, ptyID, cursor=cursor, ticket=ticket)


async def serve(
    websocket: WebSocket, terminals: Terminals, directory: str, pty_id: str, *, cursor: str | None, ticket: str | None
) -> None:
    """Check the pty exists (404) and the ticket, if any, is valid here (403), then relay."""
    try:
        terminal = terminals.terminal(directory, pty_id)
    except TerminalNotFound as exc:
        await _deny(websocket, tagged(404, "PtyNotFoundError", exc.message, ptyID=pty_id))
        return
    if ticket is not None and not (
        _trusted_origin(websocket.headers.get("origin"), websocket.headers.get("host"))
        and terminals.tickets.consume(ticket, pty_id, directory)
    ):
        await _deny(websocket, tagged(403, "PtyForbiddenError", "Invalid PTY connect ticket"))
        return
    subscription = terminal.attach(parse_cursor(cursor))
    try:
        await websocket.accept()
        await _relay(websocket, terminal, subscription)
    except (WebSocketDisconnect, OSError, RuntimeError) as exc:  # the client went away mid-send
        log.debug("pty %s: connection ended: %r", pty_id, exc)
    finally:
        terminal.detach(subscription)


async def _relay(websocket: WebSocket, terminal: Terminal, subscription: Subscription) -> None:
    replay = subscription.replay
    for start in range(0, len(replay), REPLAY_CHUNK):
        await websocket.send_text(replay[start : start + REPLAY_CHUNK])
    await websocket.send_bytes(b"\x00" + dumpb({"cursor": subscription.cursor}))
    tasks = {
        asyncio.create_task(_send_output(websocket, subscription)),
        asyncio.create_task(_receive_input(websocket, terminal)),
    }
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()  # a failed send or receive ends the connection as the client leaving does


async def _send_output(websocket: WebSocket, subscription: Subscription) -> None:
    while (chunk := await subscription.next()) is not None:
        await websocket.send_text(chunk)
    await websocket.close(subscription.close_code)


async def _receive_input(websocket: WebSocket, terminal: Terminal) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") or (message.get("text") or "").encode()
        await terminal.write(data)
