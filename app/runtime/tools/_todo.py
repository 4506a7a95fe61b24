"""todowrite / todoread: the session's todo list, persisted and announced with ``todo.updated``.
``todoread`` is retired (OpenCode 1.18 has none: todowrite answers the list), see the registry."""

from __future__ import annotations

from typing import Any

from app.jsonutil import dumps
from app.runtime.tools._base import ToolContext, ToolError, ToolResult, schema

STATUSES = ("pending", "in_progress", "completed", "cancelled")
PRIORITIES = ("high", "medium", "low")

_TODO = {
    "type": "object",
    "properties": {
        "content": {"type": "string"},
        "status": {"type": "string", "enum": list(STATUSES)},
        "priority": {"type": "string", "enum": list(PRIORITIES)},
        "id": {"type": "string"},
    },
    "required": ["content", "status", "priority"],
}


def _validated(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ToolError("todos must be a list")
    todos = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise ToolError("each todo needs a content string")
        if item.get("status") not in STATUSES or item.get("priority") not in PRIORITIES:
            raise ToolError(f"status must be one of {STATUSES} and priority one of {PRIORITIES}")
        todos.append({k: item[k] for k in ("content", "status", "priority", "id") if k in item})
    return todos


def _summary(todos: list[dict[str, Any]]) -> str:
    return f"{sum(t['status'] != 'completed' for t in todos)} todos"


class TodoWrite:
    name = "todowrite"
    description = "Replace the session's todo list (use it to plan and track multi-step work)."
    parameters = schema({"todos": {"type": "array", "items": _TODO}}, ["todos"])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        todos = _validated(args.get("todos"))
        await ctx.services.todos.replace(ctx.session, todos)
        return ToolResult(dumps(todos), title=_summary(todos), metadata={"todos": todos})


class TodoRead:
    name = "todoread"
    description = "Read the session's todo list."
    parameters = schema({}, [])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        # Retired (no model is offered it), so its permission is asked here: a rule denying
        # ``todoread`` holds even when a model calls it by name.
        await ctx.ask("todoread", ["*"], ["*"], {})
        todos = await ctx.services.todos.get(ctx.session["id"])
        return ToolResult(dumps(todos), title=_summary(todos), metadata={"todos": todos})
