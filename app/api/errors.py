"""Error bodies in OpenCode's shapes.

Legacy routes answer named errors (``{"name": "NotFoundError" | "BadRequest", "data": {...}}``);
V2 routes (``/api/...``) answer tagged errors (``{"_tag": "SessionNotFoundError", "message", ...}``);
busy, conflict, unknown-permission and terminal errors are tagged on both, as OpenCode does.
What each exception of the runtime answers is declared in ``ANSWERS``, one row per type (status,
legacy body, V2 body); only request validation, Starlette's HTTP errors and the unexpected are
handlers of their own. Anything unexpected is a 500 ``UnknownError`` with a reference that is also
logged, never a stack trace."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
    WorktreeFailed,
)

log = logging.getLogger("opensession.api")

_KIND = {"body": "Payload", "query": "Query", "path": "Params", "header": "Headers", "cookie": "Headers"}


def _is_v2(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def named_body(name: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "data": {"message": message, **extra}}


def tagged_body(tag: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"_tag": tag, "message": message, **extra}


def unavailable_body(path: str, name: str, service: str, message: str) -> dict[str, Any]:
    """A 503's body in the words of the route at ``path``: V2's declared
    ``ServiceUnavailableError`` naming the ``service``; on legacy routes (which declare no 503),
    an error named ``name``."""
    if path.startswith("/api/"):
        return tagged_body("ServiceUnavailableError", message, service=service)
    return named_body(name, message)


def _bad_request(message: str, kind: str) -> dict[str, Any]:
    """Legacy's 400, naming the offending part of the request."""
    return named_body("BadRequest", message, kind=kind)


def _invalid_request(message: str, kind: str, field: str | None = None) -> dict[str, Any]:
    """V2's 400, naming the offending part of the request (and parameter, when known)."""
    return tagged_body("InvalidRequestError", message, kind=kind, **({"field": field} if field else {}))


def named(status: int, name: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody(named_body(name, message, **extra), status_code=status)


def tagged(status: int, tag: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody(tagged_body(tag, message, **extra), status_code=status)


def _in_kind(request: Request, status: int, name: str, message: str, **extra: Any) -> JSONBody:
    """The error named ``name`` as the route's protocol words errors: tagged on V2, named on legacy."""
    return tagged(status, name, message, **extra) if _is_v2(request) else named(status, name, message, **extra)


def bad_request(request: Request, message: str, kind: str = "Payload", field: str | None = None) -> JSONBody:
    body = _invalid_request(message, kind, field) if _is_v2(request) else _bad_request(message, kind)
    return JSONBody(body, status_code=400)


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
    return _in_kind(request, exc.status_code, tag, message)


async def _unexpected(request: Request, exc: Exception) -> JSONBody:
    ref = "err_" + secrets.token_hex(4)
    log.error("unexpected error %s", ref, exc_info=exc)
    return _in_kind(request, 500, "UnknownError", "Unexpected server error. Check server logs for details.", ref=ref)


E = TypeVar("E", bound=Exception)
Shape = Callable[[E], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Answer(Generic[E]):
    """How one exception type is answered: its status, its body on legacy routes and on V2 routes
    (``/api/...``), and whether it is logged (a condition of the server an operator should see)."""

    status: int
    legacy: Shape[E]
    v2: Shape[E]
    logged: bool = False


def _answer(
    exception: type[E], status: int, legacy: Shape[E], v2: Shape[E] | None = None, *, logged: bool = False
) -> tuple[type[Exception], Answer[Any]]:
    """A row of ``ANSWERS``; without ``v2``, V2 routes answer as legacy ones (the tagged errors
    OpenCode answers on both)."""
    return exception, Answer(status, legacy, v2 or legacy, logged)


DATABASE_UNAVAILABLE = "The database is unavailable; nothing was stored. Retry shortly."

# One row per exception the runtime raises for a client to see. A subclass answers as its
# nearest listed base (``InputConflict`` as ``Conflict``), as Starlette looks handlers up.
ANSWERS: dict[type[Exception], Answer[Any]] = dict(
    [
        _answer(
            SessionNotFound,
            404,
            lambda e: named_body("NotFoundError", e.message),
            lambda e: tagged_body("SessionNotFoundError", e.message, sessionID=e.session_id),
        ),
        _answer(
            MessageNotFound,
            404,
            lambda e: named_body("NotFoundError", e.message),
            lambda e: tagged_body("MessageNotFoundError", e.message, sessionID=e.session_id, messageID=e.message_id),
        ),
        _answer(ProjectNotFound, 404, lambda e: tagged_body("ProjectNotFoundError", e.message, projectID=e.project_id)),
        _answer(ShareNotFound, 404, lambda e: named_body("NotFoundError", e.message)),
        _answer(
            PermissionNotFound, 404, lambda e: tagged_body("PermissionNotFoundError", e.message, requestID=e.request_id)
        ),
        _answer(
            QuestionNotFound, 404, lambda e: tagged_body("QuestionNotFoundError", e.message, requestID=e.request_id)
        ),
        _answer(CommandNotFound, 404, lambda e: named_body("NotFoundError", e.message)),
        _answer(McpServerNotFound, 404, lambda e: tagged_body("McpServerNotFoundError", e.message, name=e.name)),
        _answer(McpOAuthUnsupported, 400, lambda e: {"error": e.message}),  # OpenCode's McpUnsupportedOAuthError
        _answer(TerminalNotFound, 404, lambda e: tagged_body("PtyNotFoundError", e.message, ptyID=e.pty_id)),
        _answer(
            TerminalForbidden,
            403,
            lambda e: tagged_body("PtyForbiddenError", e.message),
            lambda e: tagged_body("ForbiddenError", e.message),
        ),
        _answer(
            InvalidInput,
            400,
            lambda e: _bad_request(e.message, e.kind),
            lambda e: _invalid_request(e.message, e.kind, e.field),
        ),
        # OpenCode answers an unknown model with ProviderModelNotFoundError (providerID, modelID,
        # suggestions); V2 routes name only InvalidRequestError for a 400.
        _answer(ModelNotFoundError, 400, lambda e: e.to_named_error(), lambda e: _invalid_request(str(e), "Payload")),
        _answer(
            UnencodableValue,
            400,
            lambda e: _bad_request(str(e), "Payload"),
            lambda e: _invalid_request(str(e), "Payload"),
        ),
        _answer(
            InvalidCursor,
            400,
            lambda e: _bad_request(e.message, "Query"),
            lambda e: tagged_body("InvalidCursorError", e.message),
        ),
        _answer(Conflict, 409, lambda e: tagged_body("ConflictError", e.message, resource=e.resource)),
        _answer(SessionBusy, 409, lambda e: tagged_body("SessionBusyError", e.message, sessionID=e.session_id)),
        # Nothing was committed: the client may retry.
        _answer(
            DatabaseUnavailable,
            503,
            lambda _e: named_body("DatabaseUnavailableError", DATABASE_UNAVAILABLE),
            lambda _e: tagged_body("ServiceUnavailableError", DATABASE_UNAVAILABLE, service="database"),
            logged=True,
        ),
        _answer(
            PathOutside,
            403,
            lambda e: named_body("ForbiddenError", e.message, path=e.path),
            lambda e: tagged_body("ForbiddenError", e.message, path=e.path),
        ),
        _answer(
            PathNotFound,
            404,
            lambda e: named_body("NotFoundError", e.message, path=e.path),
            lambda e: tagged_body("NotFoundError", e.message, path=e.path),
        ),
        _answer(
            SearchUnavailable,
            503,
            lambda e: named_body("SearchUnavailableError", e.message),
            lambda e: tagged_body("ServiceUnavailableError", e.message, service="search"),
            logged=True,
        ),
        _answer(PatchNotApplied, 400, lambda e: named_body("VcsApplyError", e.message, reason=e.reason)),
        _answer(WorktreeFailed, 400, lambda e: named_body(e.name, e.message)),  # named on both, as OpenCode
        _answer(
            RevertFailed,
            400,
            lambda e: named_body("RevertError", e.message),
            lambda e: tagged_body("RevertError", e.message),
        ),
        # opencode.json cannot be used for this request (e.g. a malformed model entry), naming the
        # file or key; the server keeps serving.
        _answer(
            ConfigError,
            400,
            lambda e: named_body("ConfigInvalidError", str(e)),
            lambda e: tagged_body("ConfigInvalidError", str(e)),
            logged=True,
        ),
    ]
)


async def _declared(request: Request, exc: Exception) -> JSONBody:
    """The answer ``ANSWERS`` declares for ``exc``'s type or its nearest listed base."""
    answer = next(ANSWERS[kind] for kind in type(exc).__mro__ if kind in ANSWERS)
    if answer.logged:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    shape = answer.v2 if _is_v2(request) else answer.legacy
    return JSONBody(shape(exc), status_code=answer.status)


def install(app: FastAPI) -> None:
    handlers: dict[type[Exception], Any] = {
        RequestValidationError: _validation,
        StarletteHTTPException: _http,
        Exception: _unexpected,
        **dict.fromkeys(ANSWERS, _declared),
    }
    for exception, handler in handlers.items():
        app.add_exception_handler(exception, handler)
