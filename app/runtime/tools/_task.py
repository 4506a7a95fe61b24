"""task: hand a self-contained piece of work to a sub-agent, which runs in a child session (with
``parentID``, listed by ``/session/:id/children``); its final answer is the tool's output."""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import ToolContext, ToolResult, require, schema


class Task:
    name = "task"
    description = "Run a sub-agent on a self-contained task in a child session and return its final answer."
    parameters = schema(
        {
            "description": {"type": "string", "description": "A short (3-5 words) description of the task"},
            "prompt": {"type": "string", "description": "The task for the sub-agent, with all needed context"},
            "subagent_type": {"type": "string", "description": "The agent to use (default: general)"},
        },
        ["prompt"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        prompt = require(args, "prompt")
        description = str(args.get("description") or prompt[:40])
        agent = str(args.get("subagent_type") or "general")
        await ctx.ask("task", [agent], [agent], {"description": description})
        child, answer = await ctx.services.tasks.run(ctx.session, description, prompt, agent, ctx.signal)
        return ToolResult(answer, title=description, metadata={"sessionId": child["id"], "agent": agent})
