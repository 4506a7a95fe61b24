"""Placement across machines that do not share the project directories: a request that works on
files of a directory this process's machine lacks is served by a process whose machine has it.
Two kinds of request are placed:
- on a session's files (a revert, an unrevert, a user's shell command, a V2 revert's stage, clear
  or commit): the session's directory (``Runtime.placed_elsewhere``);
- on an instance directory the request names (``?directory=``, ``?location[directory]=``, the
  ``x-opencode-directory`` header, or a V2 session's ``location`` in its body): file reads and
  searches, VCS status and diffs, worktrees, a git init, the project's configuration (read or
  changed), agents, commands and skills (read from its files), its language servers' and
  formatters' status, ``/app`` (whether it is a git repository), its V2 location (its project), a
  new terminal and a new session (``Runtime.directory_elsewhere``). Once made, a terminal is
  reached through any process (``pty_forward``); a session made where its directory is belongs
  to the project of the directory's git repository (elsewhere it would be ``global``).
Prompts need nothing of the kind: their drains are placed through the database
(``app/runtime/sessions/_cluster.py``, "Placement").

It forwards through the terminals' relay (``pty_forward.Forwarder``), with the same guarantees:
it sits inside authentication and the browser guard, passes the request's headers on (the other
process checks them again), forwards once (``x-opensession-forwarded``), only these paths (a
session id of the session shape), and only to the address a process announced for itself, never
one a client names. Where no process has the directory, the request is served here, as anywhere.
A request naming no directory, or one this machine has, costs a regular expression and a
``stat``.
"""

from __future__ import annotations

import logging
import os
import re
from urllib.parse import parse_qs, unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.middleware import refuse_unavailable
from app.api.pty_forward import FORWARDED, Forwarder, read_body, refuse_database_away, replaying
from app.jsonutil import loads
from app.runtime.errors import DatabaseUnavailable
from app.runtime.service import Runtime

log = logging.getLogger("opensession.api.placement")

_ON_SESSION_FILES = re.compile(
    r"^/session/(ses_[0-9A-Za-z]{1,64})/(?:revert|unrevert|shell)$"
    r"|^/api/session/(ses_[0-9A-Za-z]{1,64})/revert/(?:stage|clear|commit)$"
)
_ON_INSTANCE_FILES = re.compile(
    r"^/(?:file(?:/content|/status)?|find(?:/file|/symbol)?|vcs(?:/status|/diff|/diff/raw|/apply)?"
    r"|api/fs/(?:list|find|read/.*)|experimental/worktree(?:/reset)?|project/git/init|project/current"
    r"|config(?:/providers)?|agent|mode|command|skill|lsp|formatter|app|api/location)$"
)
# Made where the directory is: a terminal runs there, a session's project is its git repository's.
_NEW_IN_DIRECTORY = re.compile(r"^(?:/api)?/(?:pty|session)$")
_V2_NEW_SESSION = "/api/session"  # its body may name the directory: ``{"location": {"directory"}}``


def _instance_directory(scope: Scope) -> str | None:
    """The directory a request names, as ``app.api.deps`` reads it; None when it names none, or
    none the routes would accept (they answer that)."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    named = (query.get("location[directory]") or query.get("directory") or [None])[0]
    if named is None:
        named = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-opencode-directory"), None)
    return _usable(unquote(named)) if named else None


def _located(body: bytes) -> str | None:
    """The directory a V2 session's body names (``location.directory``), if any."""
    try:
        location = loads(body).get("location") or {}
        named = location.get("directory")
    except (ValueError, AttributeError):
        return None  # the route answers what is wrong with it
    return _usable(named) if isinstance(named, str) else None


def _usable(value: str) -> str | None:
    return os.path.normpath(value) if os.path.isabs(value) and "\0" not in value else None


class Placement:
    def __init__(self, app: ASGIApp, forwarder: Forwarder, runtime: Runtime) -> None:
        self.app = app
        self.forwarder = forwarder
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or any(name == FORWARDED.encode() for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        try:
            if method == "POST" and (on_session := _ON_SESSION_FILES.match(path)):
                url = await self.runtime.placed_elsewhere(on_session.group(1) or on_session.group(2))
            elif _ON_INSTANCE_FILES.match(path) or (method == "POST" and _NEW_IN_DIRECTORY.match(path)):
                directory = _instance_directory(scope)
                if method == "POST" and path == _V2_NEW_SESSION:
                    body = await read_body(receive)
                    receive = replaying(body, receive)  # read here, and again by the route or the relay
                    directory = _located(body) or directory
                url = None if directory is None else await self.runtime.directory_elsewhere(directory)
            else:
                url = None
        except DatabaseUnavailable:
            await refuse_database_away(scope, send)
            return
        if url is None:
            await self.app(scope, receive, send)
            return
        import httpx

        try:
            await self.forwarder.relay(scope, receive, send, url)
        except httpx.HTTPError as exc:
            log.warning("%s: the process at %s that has its directory did not answer: %r", path, url, exc)
            message = "The process whose machine has this directory did not answer; retry shortly"
            await refuse_unavailable(scope, send, "PlacementUnavailableError", "placement", message)
