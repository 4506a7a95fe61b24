"""V2 terminal routes (``/api/pty...``): the same terminals as the legacy routes, answered as
``{location, data}``; removal is a 204. A terminal created here stays listed once its process
has exited (status ``exited`` with its ``exitCode``) until it is removed, as OpenCode's V2 does."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from app.api import pty_socket
from app.api.deps import LocationDep, PtyIDPath, TerminalsDep
from app.api.responses import JSONBody
from app.api.v2.schemas import PtyCreate, PtyUpdate
from app.runtime.sessions import project_id

router = APIRouter(prefix="/api", tags=["pty"])


async def located(directory: str, data: Any) -> Response:
    location = {"directory": directory, "project": {"id": await project_id(directory), "directory": directory}}
    return JSONBody({"location": location, "data": data})


@router.get("/pty", operation_id="v2.pty.list", summary="List PTY sessions, exited ones included")
async def list_ptys(terminals: TerminalsDep, directory: LocationDep) -> Response:
    return await located(directory, await terminals.listing(directory))


@router.post("/pty", operation_id="v2.pty.create", summary="Create PTY session")
async def create_pty(terminals: TerminalsDep, directory: LocationDep, body: PtyCreate) -> Response:
    info = await terminals.create(directory, **body.model_dump(), keep_exited=True)
    return await located(directory, info)


@router.get("/pty/{ptyID}", operation_id="v2.pty.get", summary="Get PTY session (with exitCode once exited)")
async def get_pty(terminals: TerminalsDep, directory: LocationDep, ptyID: PtyIDPath) -> Response:
    return await located(directory, terminals.get(directory, ptyID))


@router.put("/pty/{ptyID}", operation_id="v2.pty.update", summary="Update PTY session (title, size)")
async def update_pty(terminals: TerminalsDep, directory: LocationDep, ptyID: PtyIDPath, body: PtyUpdate) -> Response:
    size = (body.size.rows, body.size.cols) if body.size else None
    return await located(directory, await terminals.update(directory, ptyID, title=body.title, size=size))


@router.delete("/pty/{ptyID}", operation_id="v2.pty.remove", status_code=204, summary="Remove PTY session")
async def remove_pty(terminals: TerminalsDep, directory: LocationDep, ptyID: PtyIDPath) -> Response:
    await terminals.remove(directory, ptyID)
    return Response(status_code=204)


@router.post("/pty/{ptyID}/connect-token", operation_id="v2.pty.connectToken", summary="Create PTY WebSocket token")
async def connect_token(
    request: Request, terminals: TerminalsDep, directory: LocationDep, ptyID: PtyIDPath
) -> Response:
    pty_socket.check_ticket_request(request)
    terminals.terminal(directory, ptyID)
    return await located(directory, terminals.tickets.issue(ptyID, directory))


pty_socket.add_connect_routes(router, operation_id="v2.pty.connect")
