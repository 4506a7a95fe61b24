"""The tools offered to the model, and their descriptions in OpenAI's function-tool shape."""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import Tool
from app.runtime.tools._bash import Bash
from app.runtime.tools._files import Edit, Glob, Grep, List, Read, Write
from app.runtime.tools._task import Task
from app.runtime.tools._todo import TodoRead, TodoWrite

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (Read(), Write(), Edit(), List(), Glob(), Grep(), Bash(), TodoWrite(), TodoRead(), Task())
}


def function_specs(names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": n, "description": TOOLS[n].description, "parameters": TOOLS[n].parameters},
        }
        for n in names
    ]
