"""The server's log: lines for people by default, JSON objects on request (``--log-format
json``), each carrying the ids of what it is about: the HTTP request (``request_id``, taken
from an incoming ``x-request-id`` or ``traceparent`` when there is one), the session and the
directory where the call runs in a session's context, and the process id.

The ids are context variables: a request sets them in its task, a drain task inherits the
request's that woke it and sets its session's. Secrets never reach the output: every record is
redacted on the way out (values registered with ``secret``, such as the server's password and
the environment's keys, and what looks like a key, a bearer token or a URL's password)."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import uuid
from contextvars import ContextVar

from app.jsonutil import dumps

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
SESSION_ID: ContextVar[str | None] = ContextVar("session_id", default=None)
DIRECTORY: ContextVar[str | None] = ContextVar("directory", default=None)

MASK = "***"
# What looks like a secret wherever it is: API keys (sk-..., sk-ant-...), bearer and basic
# credentials, a URL's password, key=value pairs naming a secret.
_PATTERNS = re.compile(
    r"(?P<key>\bsk-[A-Za-z0-9_\-]{8,})"
    r"|(?P<auth>\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=\-]{8,}"
    r"|(?P<url>://[^/\s:@]+:)[^@\s/]+@"
    r"|(?P<pair>\b(?:api[_-]?key|password|secret|token)\b[\"']?\s*[:=]\s*[\"']?)[^\s\"',}&]+",
    re.IGNORECASE,
)
_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.IGNORECASE)
_secrets: set[str] = set()


def secret(value: str | None) -> None:
    """Never log ``value`` (a password, a key): it is masked wherever it appears."""
    if value and len(value) >= 4:
        _secrets.add(value)


def _masked(match: re.Match[str]) -> str:
    kind = match.lastgroup
    if kind == "key":
        return MASK
    prefix = match.group(kind or 0)
    return f"{prefix}{MASK}@" if kind == "url" else f"{prefix}{MASK}"


def redact(text: str) -> str:
    for value in _secrets:
        if value in text:
            text = text.replace(value, MASK)
    return _PATTERNS.sub(_masked, text)


_TRACE_ID = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def request_id(x_request_id: str | None, traceparent: str | None) -> str:
    """The request's id: the caller's ``x-request-id`` if usable, else the trace id of its
    ``traceparent`` (so logs join the caller's trace), else a new one."""
    if x_request_id and _REQUEST_ID.match(x_request_id):
        return x_request_id
    if traceparent and (match := _TRACE_ID.match(traceparent.strip().lower())):
        return match.group(1)
    return uuid.uuid4().hex


class _Context(logging.Filter):
    """Puts the context's ids on every record and redacts its message (both formats)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.session_id = SESSION_ID.get()
        record.directory = DIRECTORY.get()
        message = redact(record.getMessage())
        record.msg, record.args = message, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line; fields that do not apply are left out."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in ("request_id", "session_id", "directory"):
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_text:
            entry["error"] = record.exc_text
        return dumps(entry)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(log_format: str, level: str, *, password: str | None = None) -> logging.Handler:
    """The root logger's one handler, on stderr, in ``log_format`` (``text`` or ``json``)."""
    secret(password)
    for name, value in os.environ.items():
        if _SECRET_NAMES.search(name):
            secret(value)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Context())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # through the root's handler
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    return handler
