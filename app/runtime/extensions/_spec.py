"""One MCP server's configuration (opencode.json's ``mcp.<name>``, or a ``POST /mcp`` body), read
into what connecting needs, with ``{env:NAME}`` resolved in its strings as OpenCode does. ``parse``
raises ValueError naming the field; the caller turns that into a ``failed`` status, like a server
that cannot start."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

LIST_TOOLS_SECONDS = 5.0  # OpenCode's default ``timeout`` (ms 5000): listing the tools at connect
CALL_SECONDS = 60.0  # the MCP SDK's default request timeout, which OpenCode's tool calls keep
CONNECT_SECONDS = 30.0  # spawning/initializing: OpenCode leaves this to the SDK, we bound it

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize(name: str) -> str:
    """OpenCode's tool-name rule: anything outside ``[a-zA-Z0-9_-]`` becomes ``_``."""
    return _UNSAFE.sub("_", name)


@dataclass(frozen=True)
class ServerSpec:
    name: str
    type: str  # "local" | "remote"
    enabled: bool = True
    command: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    oauth: bool = True  # remote: OAuth is assumed unless the config says ``"oauth": false``
    timeout: float | None = None  # seconds; None: the defaults above

    @property
    def list_seconds(self) -> float:
        return self.timeout or LIST_TOOLS_SECONDS


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} must be an object of strings")
    return dict(value)


def parse(name: str, raw: Any) -> ServerSpec:
    """Raises ValueError with a message naming the field at fault."""
    if not isinstance(raw, dict):
        raise ValueError("the server's configuration must be an object")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError("enabled must be a boolean")
    if not enabled and "type" not in raw:  # OpenCode accepts this, to switch off an inherited server
        return ServerSpec(name, "local", enabled=False)
    timeout = raw.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0):
        raise ValueError("timeout must be a positive integer (milliseconds)")
    seconds = timeout / 1000 if timeout else None
    kind = raw.get("type")
    if kind == "local":
        command = raw.get("command")
        if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
            raise ValueError("command must be a non-empty array of strings")
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError("cwd must be a string")
        environment = _strings(raw.get("environment"), "environment")
        return ServerSpec(name, kind, enabled, command, environment=environment, cwd=cwd, timeout=seconds)
    if kind == "remote":
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("url must be an http(s) URL")
        headers = _strings(raw.get("headers"), "headers")
        oauth = raw.get("oauth") is not False
        return ServerSpec(name, kind, enabled, url=url, headers=headers, oauth=oauth, timeout=seconds)
    raise ValueError('type must be "local" or "remote"')
