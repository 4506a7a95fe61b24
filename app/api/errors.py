"""Error bodies in OpenCode's shapes. Legacy routes answer named errors
(``{"name": "NotFoundError" | "BadRequest", "data": {...}}``); busy and conflict errors use the
tagged shape (``{"_tag": ..., "message": ...}``) as OpenCode does. Anything unexpected is a 500
``UnknownError`` with a reference that is also logged, never a stack trace."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.responses import JSONBody
from app.runtime.errors import InputConflict, InvalidInput, MessageNotFound, SessionBusy, SessionNotFound

log = logging.getLogger("opensession.api")

_KIND = {"body": "Payload", "query": "Query", "path": "Params", "header": "Headers", "cookie": "Headers"}


def named(status: int, name: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody({"name": name, "data": {"message": message, **extra}}, status_code=status)


def bad_request(message: str, kind: str = "Payload") -> JSONBody:
    return named(400, "BadRequest", message, kind=kind)


def tagged(status: int, tag: str, message: str, **extra: Any) -> JSONBody:
    return JSONBody({"_tag": tag, "message": message, **extra}, status_code=status)


def _describe(error: dict[str, Any]) -> str:
    location = [str(p) for p in error.get("loc", ())[1:]]
    if error.get("type") == "json_invalid":
        return f"Malformed JSON: {error.get('ctx', {}).get('error', 'cannot decode body')}"
    message = "Missing key" if error.get("type") == "missing" else error.get("msg", "Invalid value")
    return f"{message}\n  at {location}" if location else message


async def _validation(_request: Request, exc: RequestValidationError) -> JSONBody:
    errors = exc.errors()
    first = errors[0] if errors else {}
    kind = _KIND.get(str(first.get("loc", ("body",))[0]), "Payload")
    return bad_request("\n".join(_describe(e) for e in errors[:5]) or "Invalid request", kind)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONBody:
    if exc.status_code == 404:
        return named(404, "NotFoundError", f"Route not found: {request.method} {request.url.path}")
    if exc.status_code == 405:
        return named(405, "MethodNotAllowed", f"Method {request.method} not allowed on {request.url.path}")
    return named(exc.status_code, "HTTPError", str(exc.detail))


async def _unexpected(_request: Request, exc: Exception) -> JSONBody:
    ref = "err_" + secrets.token_hex(4)
    log.error("unexpected error %s", ref, exc_info=exc)
    return named(500, "UnknownError", "Unexpected server error. Check server logs for details.", ref=ref)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)

    @app.exception_handler(SessionNotFound)
    async def _session_missing(_r: Request, exc: SessionNotFound) -> JSONBody:
        return named(404, "NotFoundError", exc.message)

    @app.exception_handler(MessageNotFound)
    async def _message_missing(_r: Request, exc: MessageNotFound) -> JSONBody:
        return named(404, "NotFoundError", exc.message)

    @app.exception_handler(InvalidInput)
    async def _invalid(_r: Request, exc: InvalidInput) -> JSONBody:
        return bad_request(exc.message)

    @app.exception_handler(InputConflict)
    async def _conflict(_r: Request, exc: InputConflict) -> JSONBody:
        return tagged(409, "ConflictError", exc.message, resource=exc.message_id)

    @app.exception_handler(SessionBusy)
    async def _busy(_r: Request, exc: SessionBusy) -> JSONBody:
        return tagged(409, "SessionBusyError", exc.message, sessionID=exc.session_id)
