"""Files, search and version-control routes (``/file*``, ``/find*``, ``/vcs*``) in OpenCode's
shapes: thin translators onto the runtime's workspace, which confines every path to the instance
directory and ignores what ripgrep ignores."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response

from app.api import stainless
from app.api.deps import MAX_INT, DirectoryDep, WorkspaceDep
from app.api.legacy.schemas import PatchBody
from app.api.responses import JSONBody

router = APIRouter(tags=["file"])

GIT_MAX_CONTEXT = 2**31 - 1  # the most context lines git takes (-U<n>)
PathQuery = Annotated[str, Query(max_length=4096, description="Path relative to the project directory")]


@router.get("/file", operation_id="file.list", summary="List files")
async def list_files(request: Request, workspace: WorkspaceDep, directory: DirectoryDep, path: PathQuery) -> Response:
    """Entries of one directory: directories first, ``ignored`` as the ignore files say. For the
    0.x SDKs (``app/api/stainless.py``) this route read a file: ``{type: "raw", content}``."""
    if stainless.speaks(request):
        content = await workspace.read(directory, path)
        return JSONBody({"type": "raw", "content": content.get("content", "")})
    return JSONBody([entry.node() for entry in await workspace.listing(directory, path)])


@router.get("/file/content", operation_id="file.read", summary="Read file")
async def read_file(workspace: WorkspaceDep, directory: DirectoryDep, path: PathQuery) -> Response:
    return JSONBody(await workspace.read(directory, path))


@router.get("/file/status", operation_id="file.status", summary="Get file status")
async def file_status(workspace: WorkspaceDep, directory: DirectoryDep) -> Response:
    """Changed files against git HEAD as OpenCode's ``File`` (path, added, removed, status)."""
    changes = await workspace.status(directory)
    return JSONBody(
        [
            {"path": c["file"], "added": c["additions"], "removed": c["deletions"], "status": c["status"]}
            for c in changes
        ]
    )


@router.get("/find", operation_id="find.text", summary="Find text")
async def find_text(
    workspace: WorkspaceDep, directory: DirectoryDep, pattern: Annotated[str, Query(max_length=4096)]
) -> Response:
    """ripgrep matches of a regular expression (the first ten, as OpenCode answers)."""
    return JSONBody([match.wire() for match in await workspace.find_text(directory, pattern)])


@router.get("/find/file", operation_id="find.files", summary="Find files")
async def find_files(
    workspace: WorkspaceDep,
    directory: DirectoryDep,
    query: Annotated[str, Query(max_length=1024)],
    dirs: Literal["true", "false"] | None = None,
    type: Literal["file", "directory"] | None = None,
    limit: Annotated[int | None, Query(ge=1, le=200)] = None,
) -> Response:
    """Paths ranked by how well their names match ``query``; directories end with ``/``."""
    kind = type or ("file" if dirs == "false" else "all")
    return JSONBody(await workspace.find_files(directory, query, kind, limit or 10))


@router.get("/find/symbol", operation_id="find.symbols", summary="Find symbols")
async def find_symbols(query: Annotated[str, Query(max_length=1024)]) -> Response:
    """No language server runs here: OpenCode answers ``[]`` as well."""
    return JSONBody([])


@router.get("/vcs", operation_id="vcs.get", tags=["instance"], summary="Get VCS info")
async def vcs(workspace: WorkspaceDep, directory: DirectoryDep) -> Response:
    return JSONBody(await workspace.vcs(directory))


@router.get("/vcs/status", operation_id="vcs.status", tags=["instance"], summary="Get VCS status")
async def vcs_status(workspace: WorkspaceDep, directory: DirectoryDep) -> Response:
    return JSONBody(await workspace.status(directory))


@router.get("/vcs/diff", operation_id="vcs.diff", tags=["instance"], summary="Get VCS diff")
async def vcs_diff(
    workspace: WorkspaceDep,
    directory: DirectoryDep,
    mode: Literal["git", "branch"],
    context: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
) -> Response:
    """Any ``context`` (OpenCode sets no maximum): past git's own (a 32-bit count) it is the whole
    file either way."""
    lines = 3 if context is None else min(context, GIT_MAX_CONTEXT)
    return JSONBody(await workspace.diff(directory, mode, lines))


@router.get(
    "/vcs/diff/raw",
    operation_id="vcs.diff.raw",
    tags=["instance"],
    summary="Get raw VCS diff",
    response_class=Response,
    responses={200: {"content": {"text/x-diff; charset=utf-8": {"schema": {"type": "string"}}}}},
)
async def vcs_diff_raw(workspace: WorkspaceDep, directory: DirectoryDep) -> Response:
    return Response(await workspace.raw_diff(directory), media_type="text/x-diff; charset=utf-8")


@router.post("/vcs/apply", operation_id="vcs.apply", tags=["instance"], summary="Apply VCS patch")
async def vcs_apply(workspace: WorkspaceDep, directory: DirectoryDep, body: PatchBody) -> Response:
    """A raw patch (as ``/vcs/diff/raw`` gives it) applied to the working tree, whole or not at all:
    400 ``VcsApplyError`` with ``reason`` ``non-git`` or ``not-clean`` (and what is wrong: a hunk
    that does not fit, a path outside the project) when it cannot be."""
    await workspace.apply_patch(directory, body.patch)
    return JSONBody({"applied": True})
