"""MCP server routes (``/mcp``): statuses, adding a server at run time, connect and disconnect,
and the servers' resources (``/experimental/resource``). The servers themselves live in the
runtime's extensions domain, per project directory."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.api.deps import DirectoryDep, RuntimeDep
from app.api.legacy.schemas import McpAdd
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
