"""opensession's own routes under ``/opensession/`` (OpenCode has no equivalent, so they are left
out of the OpenAPI document): what the ``opensession`` command line needs from a running server
that the OpenCode routes do not offer."""

from __future__ import annotations

import tempfile
from typing import IO, Annotated

from fastapi import APIRouter, Query, Request, Response

from app.api.deps import DirectoryDep, ImportsDep, RuntimeDep, SettingsDep
from app.api.middleware import too_large
from app.api.responses import JSONBody
from app.runtime.usage import By

router = APIRouter(prefix="/opensession", tags=["opensession"], include_in_schema=False)

IMPORT_PATH = "/opensession/import"  # streams its body (app/api/app.py gives it its own limit)


async def _spool(request: Request, file: IO[bytes], limit: int) -> bool:
    """Write the request's body to ``file`` as it arrives; False once it is over ``limit``
    bytes (a chunked body: a declared length over it never gets here)."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return False
        file.write(chunk)
    file.seek(0)
    return True


@router.post(IMPORT_PATH.removeprefix("/opensession"))
async def import_session(
    settings: SettingsDep, imports: ImportsDep, directory: DirectoryDep, request: Request
) -> Response:
    """Import an ``opencode export`` file (the request body) into ``directory``; 409 when its
    session already exists. The body goes to a temporary file, read a message at a time: an
    export of tens of megabytes is imported with little memory."""
    limit = settings.max_import_bytes
    with tempfile.TemporaryFile() as spool:
        if not await _spool(request, spool, limit):
            return JSONBody(too_large(limit), status_code=413)
        return JSONBody(await imports.import_session(spool, directory))


@router.get("/usage")
async def usage(
    runtime: RuntimeDep,
    since: Annotated[int, Query(ge=0, description="Only messages created from this time on (ms)")] = 0,
    by: Annotated[By, Query(description="Group by model, directory or day")] = "model",
) -> Response:
    """Tokens and cost of the stored assistant messages, totalled per group."""
    return JSONBody((await runtime.usage(since, by)).as_json())


@router.get("/sessions")
async def session_overview(runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> Response:
    """The most recently updated sessions of every directory, each ``{info, messages}`` (a count)."""
    return JSONBody(await runtime.session_overview(limit))
