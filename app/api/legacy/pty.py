"""Legacy terminal routes (``/pty...``) as OpenCode's desktop app drives them. Unknown ptys are
404 ``PtyNotFoundError`` (tagged, as OpenCode answers them even here)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.api import pty_socket
from app.api.deps import DirectoryDep, PtyIDPath, TerminalsDep
from app.api.legacy.schemas import PtyCreate, PtyUpdate
from app.api.responses import JSONBody
from app.runtime.terminals import shells

router = APIRouter(tags=["pty"])


@router.get("/pty/shells", operation_id="pty.shells", summary="List available shells")
async def list_shells() -> Response:
    return JSONBody(shells())


@router.get("/pty", operation_id="pty.list", summary="List PTY sessions")
async def list_ptys(terminals: TerminalsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await terminals.listing(directory))


@router.post("/pty", operation_id="pty.create", summary="Create PTY session")
async def create_pty(terminals: TerminalsDep, directory: DirectoryDep, body: PtyCreate | None = None) -> Response:
    body = body or PtyCreate()
    return JSONBody(await terminals.create(directory, **body.model_dump()))


@router.get("/pty/{ptyID}", operation_id="pty.get", summary="Get PTY session")
async def get_pty(terminals: TerminalsDep, directory: DirectoryDep, ptyID: PtyIDPath) -> Response:
    return JSONBody(terminals.get(directory, ptyID))


@router.put("/pty/{ptyID}", operation_id="pty.update", summary="Update PTY session (title, size)")
async def update_pty(terminals: TerminalsDep, directory: DirectoryDep, ptyID: PtyIDPath, body: PtyUpdate) -> Response:
    size = (body.size.rows, body.size.cols) if body.size else None
    return JSONBody(await terminals.update(directory, ptyID, title=body.title, size=size))


@router.delete("/pty/{ptyID}", operation_id="pty.remove", summary="Remove PTY session (ends its processes)")
async def remove_pty(terminals: TerminalsDep, directory: DirectoryDep, ptyID: PtyIDPath) -> Response:
    await terminals.remove(directory, ptyID)
    return JSONBody(True)


@router.post("/pty/{ptyID}/connect-token", operation_id="pty.connectToken", summary="Create PTY WebSocket token")
async def connect_token(
    request: Request, terminals: TerminalsDep, directory: DirectoryDep, ptyID: PtyIDPath
) -> Response:
    pty_socket.check_ticket_request(request)
    terminals.terminal(directory, ptyID)
    return JSONBody(terminals.tickets.issue(ptyID, directory))


pty_socket.add_connect_routes(router, operation_id="pty.connect")
