"""The MCP servers of each project directory: those of its opencode.json ``mcp`` section, found
the first time the directory is used, as changed at run time (``POST /mcp``, a server's connect
and disconnect: on a shared database, by any process, ``_shared``)."""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from app.config import ConfigError, ConfigLoader
from app.runtime.errors import McpOAuthUnsupported, McpServerNotFound
from app.runtime.extensions._connection import Connection
from app.runtime.extensions._shared import RunTimeChanges
from app.runtime.extensions._spec import CALL_SECONDS, ServerSpec, parse, sanitize
from app.runtime.extensions._tools import McpTool
from app.store.mcp_changes import McpChange


class _Failed(Connection):
    """A server whose configuration cannot be used: it stays ``failed`` with the reason."""

    def __init__(self, name: str, directory: str, error: str) -> None:
        super().__init__(ServerSpec(name, "local", enabled=False), directory, CALL_SECONDS)
        self.status = {"status": "failed", "error": f"Invalid configuration: {error}"}

    def start(self) -> None:
        return None


class Extensions:
    """Owns every MCP connection of this process. Connections start in the background when a
    directory is first used and never block a prompt's admission; a turn waits for them only
    when it lists the tools, bounded by each server's own timeouts; ``stop`` ends them all."""

    def __init__(self, config: ConfigLoader, changes: RunTimeChanges) -> None:
        self.config = config
        self._changes = changes
        self._servers: dict[str, dict[str, Connection]] = {}

    async def start(self) -> None:
        await self._changes.start(self._apply)

    async def refresh(self) -> None:
        """Before a client is shown the servers: with every run-time change made by now."""
        await self._changes.refresh()

    def warm(self, directory: str) -> dict[str, Connection]:
        """The directory's servers, starting any configured or changed at run time and not seen
        yet (without waiting)."""
        servers = self._servers.setdefault(directory, {})
        try:
            section = self.config.load(directory).mcp
        except ConfigError:  # reported by whatever reads the configuration for the turn
            return servers
        for change in self._changes.of(directory):
            if change.name not in servers and (raw := _as_changed(section.get(change.name), change)) is not None:
                servers[change.name] = self._connection(directory, change.name, raw)
        for name, raw in section.items():
            if name not in servers:
                servers[name] = self._connection(directory, name, raw)
        return servers

    async def _apply(self, change: McpChange) -> None:
        """Another process's change: the server is made again as it now is, in a directory used
        here already (one used later gets it from ``warm``)."""
        servers = self._servers.get(change.directory)
        if servers is None:
            return
        try:
            configured = self.config.load(change.directory).mcp.get(change.name)
        except ConfigError:
            configured = None
        raw = _as_changed(configured, change)
        if raw is None:
            return
        old = servers.get(change.name)
        servers[change.name] = self._connection(change.directory, change.name, raw)
        if old is not None:
            await old.stop()

    def _connection(self, directory: str, name: str, raw: Any) -> Connection:
        try:
            spec = parse(name, raw)
        except ValueError as exc:
            return _Failed(name, directory, str(exc))
        connection = Connection(spec, directory, spec.timeout or self._call_seconds(directory))
        if spec.enabled:
            connection.start()
        return connection

    def _call_seconds(self, directory: str) -> float:
        return self.config.load(directory).mcp_timeout_seconds or CALL_SECONDS

    async def _settled(self, directory: str) -> dict[str, Connection]:
        servers = self.warm(directory)
        await asyncio.gather(*(c.ready() for c in servers.values()))
        return servers

    async def status(self, directory: str) -> dict[str, dict[str, Any]]:
        return {name: dict(c.status) for name, c in (await self._settled(directory)).items()}

    async def tools(self, directory: str) -> dict[str, McpTool]:
        """The tools of the directory's connected servers (waiting for those still connecting),
        listed afresh."""
        servers = await self._settled(directory)
        await asyncio.gather(*(c.refresh() for c in servers.values() if c.status["status"] == "connected"))
        tools: dict[str, McpTool] = {}
        for connection in servers.values():
            if connection.status["status"] == "connected":
                for definition in connection.tools:
                    tool = McpTool(connection, definition)
                    tools.setdefault(tool.name, tool)
        return tools

    async def resources(self, directory: str) -> dict[str, dict[str, Any]]:
        """Connected servers' resources keyed ``<server>:<resource name>`` (sanitized), as OpenCode."""
        connected = [c for c in (await self._settled(directory)).values() if c.status["status"] == "connected"]
        listed = await asyncio.gather(*(c.resources() for c in connected))
        found: dict[str, dict[str, Any]] = {}
        for connection, resources in zip(connected, listed, strict=True):
            for resource in resources:
                entry = {"name": resource.name, "uri": str(resource.uri), "client": connection.spec.name}
                if resource.description:
                    entry["description"] = resource.description
                if resource.mime_type:
                    entry["mimeType"] = resource.mime_type
                found[f"{sanitize(connection.spec.name)}:{sanitize(resource.name)}"] = entry
        return found

    async def commands(self, directory: str) -> list[dict[str, Any]]:
        """Connected servers' prompts as commands named ``<server>:<prompt>`` (sanitized), as
        OpenCode lists them: the template is the prompt's text with its arguments as ``$1``,
        ``$2``... so the usual command expansion fills them in."""
        connected = [c for c in (await self._settled(directory)).values() if c.status["status"] == "connected"]
        listed = await asyncio.gather(*(c.prompts() for c in connected))
        pending = [
            (c, p, {a.name: f"${i + 1}" for i, a in enumerate(p.arguments or [])})
            for c, prompts in zip(connected, listed, strict=True)
            for p in prompts
        ]
        texts = await asyncio.gather(*(c.prompt_text(p.name, holders) for c, p, holders in pending))
        commands = []
        for (connection, prompt, holders), text in zip(pending, texts, strict=True):
            command = {"name": f"{sanitize(connection.spec.name)}:{sanitize(prompt.name)}", "source": "mcp"}
            if prompt.description:
                command["description"] = prompt.description
            commands.append(command | {"template": text, "hints": list(holders.values())})
        return commands

    def tool(self, directory: str, name: str) -> McpTool | None:
        """A connected server's tool by its model-facing name (no waiting: a turn lists first)."""
        for connection in self._servers.get(directory, {}).values():
            if connection.status["status"] == "connected":
                for definition in connection.tools:
                    tool = McpTool(connection, definition)
                    if tool.name == name:
                        return tool
        return None

    async def add(self, directory: str, name: str, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Add (or replace) a server at run time and wait for its first connection attempt."""
        await self._changes.record(directory, name, raw, enabled=raw.get("enabled", True) is not False)
        servers = self.warm(directory)
        old = servers.get(name)
        servers[name] = connection = self._connection(directory, name, raw)
        if old is not None:
            await old.stop()
        await connection.ready()
        return await self.status(directory)

    async def connect(self, directory: str, name: str) -> None:
        """(Re)connect, even a server configured as disabled, as OpenCode does."""
        connection = self._find(directory, name)
        await self._changes.record(directory, name, None, enabled=True)
        await connection.stop()
        connection.start()
        await connection.ready()

    async def disconnect(self, directory: str, name: str) -> None:
        connection = self._find(directory, name)
        await self._changes.record(directory, name, None, enabled=False)
        await connection.stop({"status": "disabled"})

    def start_auth(self, directory: str, name: str) -> NoReturn:
        """OAuth flows (start, callback, authenticate) are refused for a known server."""
        self._find(directory, name)
        raise McpOAuthUnsupported(name)

    def remove_auth(self, directory: str, name: str) -> None:
        """Nothing is stored for a server's OAuth, so there is nothing to remove."""
        self._find(directory, name)

    def _find(self, directory: str, name: str) -> Connection:
        connection = self.warm(directory).get(name)
        if connection is None:
            raise McpServerNotFound(name)
        return connection

    def connected(self) -> dict[str, int]:
        """Connected servers by transport (``local`` ones are processes of ours), for the metrics."""
        counts: dict[str, int] = {}
        for servers in self._servers.values():
            for connection in servers.values():
                if connection.status.get("status") == "connected":
                    counts[connection.spec.type] = counts.get(connection.spec.type, 0) + 1
        return counts

    async def stop(self) -> None:
        await self._changes.stop()
        connections = [c for servers in self._servers.values() for c in servers.values()]
        await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)
        self._servers.clear()


def _as_changed(configured: Any, change: McpChange) -> Any:
    """A server's configuration after ``change`` (None: it has none to be made from)."""
    raw = change.config if change.config is not None else configured
    if not isinstance(raw, dict):
        return raw  # None, or a broken entry: made as a failed server
    return {**raw, "enabled": change.enabled}
