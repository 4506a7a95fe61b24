"""MCP server routes (``/mcp``): statuses, adding a server at run time, connect and disconnect,
the servers' resources (``/experimental/resource``), and the OAuth routes (refused: no OAuth
flow is hosted). The servers themselves live in the
runtime's extensions domain, per project directory."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.api.deps import DirectoryDep, RuntimeDep
from app.api.legacy.schemas import McpAdd, McpAuthCallback
from app.api.responses import JSONBody

router = APIRouter(tags=["mcp"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "McpServerNotFoundError"}}


@router.get("/mcp", operation_id="mcp.status", summary="Get MCP status")
async def status(runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    return JSONBody(await runtime.extensions.status(directory))


@router.post("/mcp", operation_id="mcp.add", summary="Add MCP server")
async def add(body: McpAdd, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    config = body.config.model_dump(exclude_none=True)
    return JSONBody(await runtime.extensions.add(directory, body.name, config))


@router.post("/mcp/{name}/connect", operation_id="mcp.connect", summary="Connect an MCP server", responses=_NOT_FOUND)
async def connect(name: str, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    await runtime.extensions.connect(directory, name)
    return JSONBody(True)


@router.post(
    "/mcp/{name}/disconnect", operation_id="mcp.disconnect", summary="Disconnect an MCP server", responses=_NOT_FOUND
)
async def disconnect(name: str, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    await runtime.extensions.disconnect(directory, name)
    return JSONBody(True)


@router.get(
    "/experimental/resource",
    operation_id="experimental.resource.list",
    tags=["experimental"],
    summary="Get MCP resources",
)
async def resources(runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    return JSONBody(await runtime.extensions.resources(directory))


_AUTH: dict[int | str, dict[str, Any]] = {**_NOT_FOUND, 400: {"description": "McpUnsupportedOAuthError"}}


@router.post("/mcp/{name}/auth", operation_id="mcp.auth.start", summary="Start MCP OAuth", responses=_AUTH)
async def auth_start(name: str, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    runtime.extensions.start_auth(directory, name)


@router.post(
    "/mcp/{name}/auth/callback", operation_id="mcp.auth.callback", summary="Complete MCP OAuth", responses=_AUTH
)
async def auth_callback(name: str, body: McpAuthCallback, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    runtime.extensions.start_auth(directory, name)


@router.post(
    "/mcp/{name}/auth/authenticate",
    operation_id="mcp.auth.authenticate",
    summary="Authenticate MCP OAuth",
    responses=_AUTH,
)
async def auth_authenticate(name: str, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    runtime.extensions.start_auth(directory, name)


@router.delete("/mcp/{name}/auth", operation_id="mcp.auth.remove", summary="Remove MCP OAuth", responses=_NOT_FOUND)
async def auth_remove(name: str, runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    runtime.extensions.remove_auth(directory, name)
    return JSONBody({"success": True})
