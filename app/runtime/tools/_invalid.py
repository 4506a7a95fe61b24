"""invalid: where a call to a tool that does not exist (or with unparseable arguments) is routed,
as OpenCode does, so the model reads what went wrong in a completed result instead of the turn
failing. Never offered to the model."""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import ToolContext, ToolResult, schema

NAME = "invalid"


class Invalid:
    name = NAME
    description = "Do not use"
    parameters = schema({"tool": {"type": "string"}, "error": {"type": "string"}}, ["tool", "error"])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult(
            output=f"The arguments provided to the tool are invalid: {args.get('error', '')}", title="Invalid Tool"
        )
