"""The tools offered to the model, and their descriptions in OpenAI's function-tool shape."""

from __future__ import annotations

from typing import Any

from app.runtime.tools.base import Tool
from app.runtime.tools.bash import Bash
from app.runtime.tools.files import Edit, Glob, Grep, List, Read, Write
from app.runtime.tools.task import Task
from app.runtime.tools.todo import TodoRead, TodoWrite

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
