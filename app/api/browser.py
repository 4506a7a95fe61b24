"""What a web page may do to a server on its user's machine: nothing it was not invited to.

A server on 127.0.0.1 is reachable from every page the user opens. A page cannot read a foreign
origin's answers, but it can *send* it "simple" requests (forms, ``<img>``, ``fetch`` in
``no-cors`` mode) without asking first, and with DNS rebinding (its own name resolving to
127.0.0.1) it can read answers too. ``BrowserGuard`` closes both doors for HTTP and WebSocket
alike:

- **Host.** Without a password, a request must name this server the way a local client does:
  ``localhost``, an IP address, the bound hostname or one given with ``--allow-host``. A
  rebinding page always carries its own *name* in ``Host`` (an address literal cannot be
  rebound), so it is refused. With a password the check is off: a rebinding page has no
  credentials for its own origin.
- **Who sent it.** A request from a page of a foreign origin (its ``Origin``, or, where a browser
  sends none, ``Sec-Fetch-Site`` with the ``Referer``'s origin) is refused whatever its method, so
  neither a cross-site ``POST`` nor an ``<img>`` GET can start work. Allowed origins are the CORS
  list, and a page of this server's own origin. Shared pages stay open to links from anywhere.
- **What it sent.** A body must be JSON: every route takes JSON, and a JSON body is exactly what
  a browser cannot send cross-site without a preflight (which CORS answers only for allowed
  origins). A form or ``text/plain`` post is refused even when a browser hid its origin.

Non-browser clients (the TUI, the SDKs, curl) send neither ``Origin`` nor ``Sec-Fetch-*`` and are
unaffected."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.middleware import is_public, refuse

# Browser origins OpenCode's server allows: any loopback port, the desktop app (Electron's
# oc://renderer, Tauri's origins) and opencode.ai's own web apps.
ALLOWED_ORIGINS = (
    r"http://(localhost|127\.0\.0\.1):\d+|oc://renderer.*|tauri://localhost|https?://tauri\.localhost"
    r"|https://([a-z0-9-]+\.)*opencode\.ai"
)

_LOCAL_NAMES = frozenset({"localhost"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_FOREIGN_SITES = frozenset({b"cross-site", b"same-site"})


def host_name(value: str) -> str:
    """``Host`` without its port, lower case, brackets and a trailing dot removed."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0].rstrip(".") if value.count(":") <= 1 else value


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _has_body(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"content-length", b"0").strip() not in (b"0", b"") or b"transfer-encoding" in headers


def _origin_of(url: bytes) -> str | None:
    parts = urlsplit(url.decode("latin-1"))
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


class BrowserGuard:
    """Refuses rebinding hosts (421), foreign pages (403) and non-JSON bodies (415)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        origins: Iterable[str],
        hosts: Iterable[str] | None,
    ) -> None:
        """``hosts`` None (a password is set, or ``*`` was allowed) turns the Host check off."""
        self.app = app
        self.origins = frozenset(origins)
        self.origin_pattern = re.compile(ALLOWED_ORIGINS)
        self.hosts = None if hosts is None else _LOCAL_NAMES | {host_name(host) for host in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        status, name, message = problem
        await refuse(scope, send, status, {"name": name, "data": {"message": message}})

    def _problem(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host and not self._local_host(host):
            return 421, "ForbiddenHost", f"Host {host!r} is not this server's name (see --allow-host)"
        method = scope.get("method", "GET")
        if method == "OPTIONS" or is_public(scope):
            return None
        origin = self._requester(headers)
        if origin is not None and not self._allowed(origin, host):
            return 403, "ForbiddenOrigin", f"Requests from {origin} are not allowed (see --cors)"
        if method in _WRITES and _has_body(headers) and not _is_json(headers.get(b"content-type", b"")):
            return 415, "UnsupportedMediaType", "The request body must be JSON (Content-Type: application/json)"
        return None

    def _local_host(self, host: str) -> bool:
        name = host_name(host)
        return _is_address(name) or name in (self.hosts or ())

    def _requester(self, headers: dict[bytes, bytes]) -> str | None:
        """The origin of the page that sent the request; None when no page did (or its own did).

        A browser names it in ``Origin`` on every cross-origin request but plain GETs (``<img>``,
        navigation); those it marks with ``Sec-Fetch-Site``, and the page, if it is not hiding,
        in ``Referer``. "null" (a sandboxed frame, a hidden referrer) is nobody's origin."""
        origin = headers.get(b"origin")
        if origin is not None:
            return origin.decode("latin-1")
        if headers.get(b"sec-fetch-site") not in _FOREIGN_SITES:
            return None
        referer = headers.get(b"referer")
        return (_origin_of(referer) if referer else None) or "null"

    def _allowed(self, origin: str, host: str) -> bool:
        if origin in self.origins or self.origin_pattern.fullmatch(origin):
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host.strip().lower()
