"""opensession's own routes under ``/opensession/`` (OpenCode has no equivalent, so they are left
out of the OpenAPI document): what the ``opensession`` command line needs from a running server
that the OpenCode routes do not offer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.api.deps import DirectoryDep, RuntimeDep
from app.api.responses import JSONBody
from app.jsonutil import loads
from app.runtime.errors import InvalidInput

router = APIRouter(prefix="/opensession", tags=["opensession"], include_in_schema=False)


@router.post("/import")
async def import_session(runtime: RuntimeDep, directory: DirectoryDep, request: Request) -> Response:
    """Import an ``opencode export`` file (the request body) into ``directory``; 409 when its
    session already exists."""
    try:
        data = loads(await request.body())
    except ValueError:
        raise InvalidInput("the body is not JSON") from None
    return JSONBody(await runtime.imports.import_session(data, directory))


@router.get("/sessions")
async def session_overview(runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> Response:
    """The most recently updated sessions of every directory, each ``{info, messages}`` (a count)."""
    return JSONBody(await runtime.session_overview(limit))
