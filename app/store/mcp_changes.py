"""The ``mcp_changes`` table: MCP servers added, connected or disconnected at run time on a
database several processes share, so that every process offers the same servers
(app/runtime/extensions/_shared.py keeps each process's copy current)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.jsonutil import dumps, loads
from app.store import sql
from app.store.database import Reader, WriteScope

HOLD = "opensession:mcp_changes"  # held by each change: versions are handed out one at a time


@dataclass(frozen=True, slots=True)
class McpChange:
    """A server's latest run-time change in a directory: the configuration it was given (None:
    opencode.json's) and whether it is to be connected."""

    directory: str
    name: str
    config: dict[str, Any] | None
    enabled: bool
    version: int


async def every(reader: Reader) -> list[McpChange]:
    """Every directory's changes, oldest first."""
    return [
        McpChange(directory, name, None if config is None else loads(config), bool(enabled), int(version))
        for directory, name, config, enabled, version in await reader.fetch(sql.ALL_MCP_CHANGES)
    ]


async def record(
    scope: WriteScope, directory: str, name: str, config: dict[str, Any] | None, enabled: bool
) -> McpChange:
    """Record a change of ``name`` in ``directory`` as the cluster's newest (``config`` None: the
    configuration stays what the last change gave it)."""
    await scope.hold(HOLD)
    changes = await every(scope)
    if config is None:
        config = next((c.config for c in changes if (c.directory, c.name) == (directory, name)), None)
    change = McpChange(directory, name, config, enabled, max((c.version for c in changes), default=0) + 1)
    scope.execute(
        sql.UPSERT_MCP_CHANGE,
        {
            "directory": directory,
            "name": name,
            "config": None if config is None else dumps(config),
            "enabled": enabled,
            "version": change.version,
        },
    )
    return change
