"""Error bodies in OpenCode's shapes.

Legacy routes answer named errors (``{"name": "NotFoundError" | "BadRequest", "data": {...}}``);
V2 routes (``/api/...``) answer tagged errors (``{"_tag": "SessionNotFoundError", "message", ...}``);
busy, conflict, unknown-permission and terminal errors are tagged on both, as OpenCode does.
Anything unexpected is a 500 ``UnknownError`` with a reference that is also logged, never a stack
trace."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.responses import JSONBody
from app.config import ConfigError
from app.jsonutil import UnencodableValue
from app.providers.registry import ModelNotFoundError
from app.runtime.errors import (
    CommandNotFound,
    Conflict,
    DatabaseUnavailable,
    InvalidCursor,
    InvalidInput,
    McpOAuthUnsupported,
    McpServerNotFound,
    MessageNotFound,
    PatchNotApplied,
    PathNotFound,
    PathOutside,
    PermissionNotFound,
    ProjectNotFound,
    QuestionNotFound,
    RevertFailed,
    SearchUnavailable,
    SessionBusy,
    SessionNotFound,
    ShareNotFound,
    TerminalForbidden,
    TerminalNotFound,
)

log = logging.getLogger("opensession.api")

_KIND = {"body": "Payload", "query": "Query", "path": "Params", "header": "Headers", "cookie": "Headers"}


def _is_v2(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def named(status: int, name: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody({"name": name, "data": {"message": message, **extra}}, status_code=status)


def tagged(status: int, tag: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody({"_tag": tag, "message": message, **extra}, status_code=status)


def bad_request(request: Request, message: str, kind: str = "Payload", field: str | None = None) -> JSONBody:
    if _is_v2(request):
        extra = {"field": field} if field else {}
        return tagged(400, "InvalidRequestError", message, kind=kind, **extra)
    return named(400, "BadRequest", message, kind=kind)


def _describe(error: dict[str, Any]) -> str:
    location = [str(p) for p in error.get("loc", ())[1:]]
    if error.get("type") == "json_invalid":
        return f"Malformed JSON: {error.get('ctx', {}).get('error', 'cannot decode body')}"
    message = "Missing key" if error.get("type") == "missing" else error.get("msg", "Invalid value")
    return f"{message}\n  at {location}" if location else message


async def _validation(request: Request, exc: RequestValidationError) -> JSONBody:
    errors = exc.errors()
    first = errors[0] if errors else {}
    location = first.get("loc", ("body",))
    kind = _KIND.get(str(location[0]), "Payload")
    field = str(location[1]) if kind == "Params" and len(location) > 1 else None
    message = "\n".join(_describe(e) for e in errors[:5]) or "Invalid request"
    return bad_request(request, message, kind, field)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONBody:
    if exc.status_code == 400:  # the body could not be decoded (bad UTF-8, nesting, encoding...)
        return bad_request(request, f"Malformed request body: {exc.detail}", "Payload")
    if exc.status_code == 404:
        message, tag = f"Route not found: {request.method} {request.url.path}", "NotFoundError"
    elif exc.status_code == 405:
        message, tag = f"Method {request.method} not allowed on {request.url.path}", "MethodNotAllowed"
    else:
        message, tag = str(exc.detail), "HTTPError"
    if _is_v2(request):
        return tagged(exc.status_code, tag, message)
    return named(exc.status_code, tag, message)


async def _unexpected(request: Request, exc: Exception) -> JSONBody:
    ref = "err_" + secrets.token_hex(4)
    log.error("unexpected error %s", ref, exc_info=exc)
    message = "Unexpected server error. Check server logs for details."
    if _is_v2(request):
        return tagged(500, "UnknownError", message, ref=ref)
    return named(500, "UnknownError", message, ref=ref)


async def _session_missing(request: Request, exc: SessionNotFound) -> JSONBody:
    if _is_v2(request):
        return tagged(404, "SessionNotFoundError", exc.message, sessionID=exc.session_id)
    return named(404, "NotFoundError", exc.message)


async def _message_missing(request: Request, exc: MessageNotFound) -> JSONBody:
    if _is_v2(request):
        return tagged(404, "MessageNotFoundError", exc.message, sessionID=exc.session_id, messageID=exc.message_id)
    return named(404, "NotFoundError", exc.message)


async def _project_missing(_request: Request, exc: ProjectNotFound) -> JSONBody:
    return tagged(404, "ProjectNotFoundError", exc.message, projectID=exc.project_id)  # as OpenCode's


async def _share_missing(_request: Request, exc: ShareNotFound) -> JSONBody:
    return named(404, "NotFoundError", exc.message)


async def _permission_missing(_request: Request, exc: PermissionNotFound) -> JSONBody:
    return tagged(404, "PermissionNotFoundError", exc.message, requestID=exc.request_id)


async def _question_missing(_request: Request, exc: QuestionNotFound) -> JSONBody:
    return tagged(404, "QuestionNotFoundError", exc.message, requestID=exc.request_id)


async def _command_missing(_request: Request, exc: CommandNotFound) -> JSONBody:
    return named(404, "NotFoundError", exc.message)


async def _mcp_missing(_request: Request, exc: McpServerNotFound) -> JSONBody:
    return tagged(404, "McpServerNotFoundError", exc.message, name=exc.name)


async def _mcp_oauth(_request: Request, exc: McpOAuthUnsupported) -> JSONBody:
    return JSONBody({"error": exc.message}, status_code=400)  # OpenCode's McpUnsupportedOAuthError


async def _terminal_missing(_request: Request, exc: TerminalNotFound) -> JSONBody:
    return tagged(404, "PtyNotFoundError", exc.message, ptyID=exc.pty_id)


async def _terminal_forbidden(request: Request, exc: TerminalForbidden) -> JSONBody:
    return tagged(403, "ForbiddenError" if _is_v2(request) else "PtyForbiddenError", exc.message)


async def _invalid(request: Request, exc: InvalidInput) -> JSONBody:
    return bad_request(request, exc.message, exc.kind, exc.field)


async def _model_missing(request: Request, exc: ModelNotFoundError) -> JSONBody:
    """OpenCode answers an unknown model with 400 ``ProviderModelNotFoundError`` (providerID,
    modelID, suggestions); V2 routes name only ``InvalidRequestError`` for a 400."""
    if _is_v2(request):
        return tagged(400, "InvalidRequestError", str(exc), kind="Payload")
    return JSONBody(exc.to_named_error(), status_code=400)


async def _unencodable(request: Request, exc: UnencodableValue) -> JSONBody:
    return bad_request(request, str(exc), "Payload")


async def _invalid_cursor(request: Request, exc: InvalidCursor) -> JSONBody:
    if _is_v2(request):
        return tagged(400, "InvalidCursorError", exc.message)
    return named(400, "BadRequest", exc.message, kind="Query")


async def _conflict(_request: Request, exc: Conflict) -> JSONBody:
    return tagged(409, "ConflictError", exc.message, resource=exc.resource)


async def _unavailable(request: Request, exc: DatabaseUnavailable) -> JSONBody:
    """The database is unreachable: nothing was committed, the client may retry."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    message = "The database is unavailable; nothing was stored. Retry shortly."
    if _is_v2(request):
        return tagged(503, "DatabaseUnavailableError", message)
    return named(503, "DatabaseUnavailableError", message)


async def _busy(_request: Request, exc: SessionBusy) -> JSONBody:
    return tagged(409, "SessionBusyError", exc.message, sessionID=exc.session_id)


async def _path_outside(request: Request, exc: PathOutside) -> JSONBody:
    if _is_v2(request):
        return tagged(403, "ForbiddenError", exc.message, path=exc.path)
    return named(403, "ForbiddenError", exc.message, path=exc.path)


async def _path_missing(request: Request, exc: PathNotFound) -> JSONBody:
    if _is_v2(request):
        return tagged(404, "NotFoundError", exc.message, path=exc.path)
    return named(404, "NotFoundError", exc.message, path=exc.path)


async def _search_unavailable(request: Request, exc: SearchUnavailable) -> JSONBody:
    log.warning("%s %s: %s", request.method, request.url.path, exc.message)
    if _is_v2(request):
        return tagged(503, "SearchUnavailableError", exc.message)
    return named(503, "SearchUnavailableError", exc.message)


async def _patch_not_applied(request: Request, exc: PatchNotApplied) -> JSONBody:
    return named(400, "VcsApplyError", exc.message, reason=exc.reason)


async def _revert_failed(request: Request, exc: RevertFailed) -> JSONBody:
    if _is_v2(request):
        return tagged(400, "RevertError", exc.message)
    return named(400, "RevertError", exc.message)


async def _config_invalid(request: Request, exc: ConfigError) -> JSONBody:
    """opencode.json cannot be used for this request (e.g. a malformed model entry): OpenCode's
    ``ConfigInvalidError``, naming the file or key; the server keeps serving."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    if _is_v2(request):
        return tagged(400, "ConfigInvalidError", str(exc))
    return named(400, "ConfigInvalidError", str(exc))


def install(app: FastAPI) -> None:
    handlers: dict[type[Exception], Any] = {
        RequestValidationError: _validation,
        StarletteHTTPException: _http,
        Exception: _unexpected,
        SessionNotFound: _session_missing,
        MessageNotFound: _message_missing,
        InvalidInput: _invalid,
        ModelNotFoundError: _model_missing,
        ConfigError: _config_invalid,
        PatchNotApplied: _patch_not_applied,
        RevertFailed: _revert_failed,
        UnencodableValue: _unencodable,
        ShareNotFound: _share_missing,
        ProjectNotFound: _project_missing,
        PermissionNotFound: _permission_missing,
        QuestionNotFound: _question_missing,
        CommandNotFound: _command_missing,
        TerminalNotFound: _terminal_missing,
        McpServerNotFound: _mcp_missing,
        McpOAuthUnsupported: _mcp_oauth,
        TerminalForbidden: _terminal_forbidden,
        InvalidCursor: _invalid_cursor,
        Conflict: _conflict,
        SessionBusy: _busy,
        DatabaseUnavailable: _unavailable,
        PathOutside: _path_outside,
        PathNotFound: _path_missing,
        SearchUnavailable: _search_unavailable,
    }
    for exception, handler in handlers.items():
        app.add_exception_handler(exception, handler)
