"""Permission routes of both protocols: list pending requests, reply (``/permission/:id/reply``,
the deprecated ``/session/:id/permissions/:id`` and V2's ``/api/session/:id/permission/:id/reply``)
and the saved "always" rules. All reach the same runtime service.

Routes that name no session are scoped to the request's directory, as OpenCode's instance is:
they list and answer only requests of sessions in that directory. V2's session routes are
scoped by their session."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import ID_PATTERN, DirectoryDep, LocationDep, PermissionsDep, RuntimeDep, SessionIDPath, SessionsDep
from app.api.responses import JSONBody

router = APIRouter(tags=["permission"])

RequestIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="per"), description="Permission request ID")]
Reply = Literal["once", "always", "reject"]


class ReplyBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    reply: Reply
    message: str | None = Field(default=None, max_length=10_000)


class RespondBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    response: Reply


@router.get("/permission", operation_id="permission.list", summary="Pending permission requests")
async def pending(permissions: PermissionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(permissions.pending(directory=directory))


@router.post("/permission/{requestID}/reply", operation_id="permission.reply")
async def reply(runtime: RuntimeDep, directory: DirectoryDep, requestID: RequestIDPath, body: ReplyBody) -> Response:
    await runtime.reply_permission(requestID, body.reply, body.message, directory=directory)
    return JSONBody(True)


@router.post("/session/{sessionID}/permissions/{permissionID}", operation_id="permission.respond", deprecated=True)
async def respond(
    runtime: RuntimeDep,
    directory: DirectoryDep,
    sessionID: SessionIDPath,
    permissionID: RequestIDPath,
    body: RespondBody,
) -> Response:
    await runtime.reply_permission(permissionID, body.response, None, session_id=sessionID, directory=directory)
    return JSONBody(True)


@router.get("/api/permission/request", operation_id="v2.permission.requests")
async def v2_pending(permissions: PermissionsDep, directory: LocationDep) -> Response:
    return JSONBody({"location": {"directory": directory}, "data": permissions.pending_v2(directory=directory)})


@router.get("/api/session/{sessionID}/permission", operation_id="v2.session.permission.list")
async def v2_session_pending(sessions: SessionsDep, permissions: PermissionsDep, sessionID: SessionIDPath) -> Response:
    await sessions.get(sessionID)
    return JSONBody({"data": permissions.pending_v2(sessionID)})


@router.get("/api/session/{sessionID}/permission/{requestID}", operation_id="v2.session.permission.get")
async def v2_get(
    sessions: SessionsDep, permissions: PermissionsDep, sessionID: SessionIDPath, requestID: RequestIDPath
) -> Response:
    await sessions.get(sessionID)
    permissions.get(requestID, session_id=sessionID)
    return JSONBody({"data": next(r for r in permissions.pending_v2(sessionID) if r["id"] == requestID)})


@router.post(
    "/api/session/{sessionID}/permission/{requestID}/reply", operation_id="v2.session.permission.reply", status_code=204
)
async def v2_reply(
    runtime: RuntimeDep, sessionID: SessionIDPath, requestID: RequestIDPath, body: ReplyBody
) -> Response:
    await runtime.reply_permission(requestID, body.reply, body.message, session_id=sessionID)
    return Response(status_code=204)


@router.get(
    "/api/permission/saved",
    operation_id="v2.permission.saved.list",
    summary="Rules saved by replying always (persisted)",
)
async def saved(permissions: PermissionsDep) -> Response:
    return JSONBody({"data": await permissions.saved()})


@router.delete("/api/permission/saved/{savedID}", operation_id="v2.permission.saved.delete", status_code=204)
async def forget(permissions: PermissionsDep, savedID: RequestIDPath) -> Response:
    await permissions.forget(savedID)
    return Response(status_code=204)
