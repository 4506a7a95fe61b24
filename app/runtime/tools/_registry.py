"""The tools offered to the model, and their descriptions in OpenAI's function-tool shape."""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import Tool
from app.runtime.tools._bash import Bash
from app.runtime.tools._files import Edit, Glob, Grep, List, Read, Write
from app.runtime.tools._invalid import NAME as INVALID
from app.runtime.tools._invalid import Invalid
from app.runtime.tools._patch import ApplyPatch
from app.runtime.tools._question import Question
from app.runtime.tools._skills import SkillTool
from app.runtime.tools._task import Task
from app.runtime.tools._todo import TodoRead, TodoWrite
from app.runtime.tools._webfetch import WebFetch

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Invalid(),
        Read(),
        Write(),
        Edit(),
        List(),
        Glob(),
        Grep(),
        Bash(),
        TodoWrite(),
        TodoRead(),
        Task(),
        Question(),
        SkillTool(),
        ApplyPatch(),
        WebFetch(),
    )
}

# What the model may be offered: everything but ``invalid``, which only repaired calls reach.
OFFERED = [name for name in TOOLS if name != INVALID]


def uses_patch(model_id: str) -> bool:
    """OpenCode gives GPT-family models (but not gpt-4* or gpt-oss) apply_patch instead of edit/write."""
    return "gpt-" in model_id and "oss" not in model_id and "gpt-4" not in model_id


def offered_for(model_id: str) -> list[str]:
    """The tools a model is offered (before permissions): apply_patch or edit/write, never both."""
    hidden = {"edit", "write"} if uses_patch(model_id) else {"apply_patch"}
    return [name for name in OFFERED if name not in hidden]


def repair(name: str, error: str | None) -> tuple[str, dict[str, Any] | None]:
    """OpenCode's repair of a call that failed validation: a mis-cased known name is lowercased;
    otherwise the call goes to ``invalid`` with ``{tool, error}`` as its input. ``error`` is None
    when only the name was at fault. Returns the tool to run and, if rewritten, its input."""
    lower = name.lower()
    if error is None and lower != name and lower in OFFERED:
        return lower, None
    if error is None:
        error = f"Model tried to call unavailable tool '{name}'. Available tools: {', '.join(OFFERED)}."
    return INVALID, {"tool": name, "error": error}


def listing(model_id: str) -> list[dict[str, Any]]:
    """``GET /experimental/tool``: what a model gets (``invalid`` included, as OpenCode lists it),
    each with its JSON schema."""
    names = [INVALID, *offered_for(model_id)]
    return [
        {
            "id": n,
            "description": TOOLS[n].description,
            "parameters": {"$schema": "https://json-schema.org/draft/2020-12/schema", **TOOLS[n].parameters},
        }
        for n in names
    ]


def function_specs(names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": n, "description": TOOLS[n].description, "parameters": TOOLS[n].parameters},
        }
        for n in names
    ]
