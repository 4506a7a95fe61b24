"""V2 filesystem reads (``/api/fs/...``): list one directory, serve one file's bytes, find files
by name (the TUI's ``@`` picker). Answers carry the V2 ``{location, data}`` envelope; errors are
V2's tagged errors. Same workspace, confinement and ignore rules as the legacy routes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import FileResponse

from app.api.deps import MAX_INT, LocationDep, WorkspaceDep
from app.api.responses import JSONBody
from app.runtime.sessions import project_id

router = APIRouter(prefix="/api/fs", tags=["filesystem"])

FIND_LIMIT = 100  # what OpenCode's file search returns when no limit is given
FIND_MOST = 1000  # the most one search returns, whatever limit is asked


async def _answer(directory: str, data: list[dict[str, Any]]) -> Response:
    project = {"id": await project_id(directory), "directory": directory}
    return JSONBody({"location": {"directory": directory, "project": project}, "data": data})


@router.get("/list", operation_id="v2.fs.list", summary="List directory")
async def list_directory(
    workspace: WorkspaceDep, directory: LocationDep, path: Annotated[str, Query(max_length=4096)] = ""
) -> Response:
    """Direct children of one directory relative to the location; directories end with ``/``."""
    entries = await workspace.listing(directory, path)
    return await _answer(directory, [{"path": e.node()["path"], "type": e.node()["type"]} for e in entries])


@router.get(
    "/read/{path:path}",
    operation_id="v2.fs.read",
    summary="Read file",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def read_file(workspace: WorkspaceDep, directory: LocationDep, path: str) -> Response:
    """One file's bytes as they are, with its MIME type."""
    real, mime = await workspace.file(directory, path)
    return FileResponse(real, media_type=mime)


@router.get("/find", operation_id="v2.fs.find", summary="Find files")
async def find(
    workspace: WorkspaceDep,
    directory: LocationDep,
    query: Annotated[str, Query(max_length=1024)],
    type: Literal["file", "directory"] | None = None,
    limit: Annotated[int | None, Query(gt=0, le=MAX_INT)] = None,
) -> Response:
    """Files and directories ranked by how well their names match ``query``: the best ``limit``
    of them, at most ``FIND_MOST`` (OpenCode sets no maximum; a larger limit is served as that)."""
    wanted = min(limit or FIND_LIMIT, FIND_MOST)
    paths = await workspace.find_files(directory, query, type or "all", wanted)
    return await _answer(directory, [{"path": p, "type": "directory" if p.endswith("/") else "file"} for p in paths])
