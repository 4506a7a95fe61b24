"""MCP server routes (``/mcp``): statuses, adding a server at run time, connect and disconnect,
the servers' resources (``/experimental/resource``), and the OAuth routes (refused: no OAuth
flow is hosted). The servers themselves live in the
runtime's extensions domain, per project directory."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.api.deps import DirectoryDep, ExtensionsDep
from app.api.legacy.schemas import McpAdd, McpAuthCallback
from app.api.responses import JSONBody

router = APIRouter(tags=["mcp"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "McpServerNotFoundError"}}


@router.get("/mcp", operation_id="mcp.status", summary="Get MCP status")
async def status(extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await extensions.status(directory))


@router.post("/mcp", operation_id="mcp.add", summary="Add MCP server")
async def add(body: McpAdd, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    config = body.config.model_dump(exclude_none=True)
    return JSONBody(await extensions.add(directory, body.name, config))


@router.post("/mcp/{name}/connect", operation_id="mcp.connect", summary="Connect an MCP server", responses=_NOT_FOUND)
async def connect(name: str, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    await extensions.connect(directory, name)
    return JSONBody(True)


@router.post(
    "/mcp/{name}/disconnect", operation_id="mcp.disconnect", summary="Disconnect an MCP server", responses=_NOT_FOUND
)
async def disconnect(name: str, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    await extensions.disconnect(directory, name)
    return JSONBody(True)


@router.get(
    "/experimental/resource",
    operation_id="experimental.resource.list",
    tags=["experimental"],
    summary="Get MCP resources",
)
async def resources(extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await extensions.resources(directory))


_AUTH: dict[int | str, dict[str, Any]] = {**_NOT_FOUND, 400: {"description": "McpUnsupportedOAuthError"}}


@router.post("/mcp/{name}/auth", operation_id="mcp.auth.start", summary="Start MCP OAuth", responses=_AUTH)
async def auth_start(name: str, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    extensions.start_auth(directory, name)


@router.post(
    "/mcp/{name}/auth/callback", operation_id="mcp.auth.callback", summary="Complete MCP OAuth", responses=_AUTH
)
async def auth_callback(
    name: str, body: McpAuthCallback, extensions: ExtensionsDep, directory: DirectoryDep
) -> Response:
    extensions.start_auth(directory, name)


@router.post(
    "/mcp/{name}/auth/authenticate",
    operation_id="mcp.auth.authenticate",
    summary="Authenticate MCP OAuth",
    responses=_AUTH,
)
async def auth_authenticate(name: str, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    extensions.start_auth(directory, name)


@router.delete("/mcp/{name}/auth", operation_id="mcp.auth.remove", summary="Remove MCP OAuth", responses=_NOT_FOUND)
async def auth_remove(name: str, extensions: ExtensionsDep, directory: DirectoryDep) -> Response:
    extensions.remove_auth(directory, name)
    return JSONBody({"success": True})
