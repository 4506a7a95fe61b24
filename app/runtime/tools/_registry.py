"""The tools, which of them a model is offered, and their descriptions in OpenAI's function-tool
shape.

The set and its order are OpenCode 1.18's (its ``ToolRegistry``): ``invalid``, ``question``,
``bash``, ``read``, ``glob``, ``grep``, ``edit``, ``write``, ``task``, ``webfetch``, ``todowrite``,
``websearch``, ``skill``, ``apply_patch``; ``/experimental/tool/ids`` lists them so. A model is
offered them less:
- ``invalid``, which only repaired calls reach;
- ``question`` where ``OPENCODE_CLIENT`` says no one is there to answer (``ToolSettings``);
- ``websearch`` unless it is enabled (off by default: ``ToolSettings``);
- ``edit``/``write`` or ``apply_patch``, by model (``uses_patch``);
then whatever the agent's permission rules deny outright (the turn filters those: OpenCode's
agents deny ``question`` to all but ``build`` and ``plan``, ``todowrite`` to ``general``).

``list`` and ``todoread`` (OpenCode until 1.14) are retired as OpenCode retired them: offered to
no model and listed nowhere, so an agent's ``tools``/``permission`` entry for them changes
nothing. They still run when a model calls them by name (one continuing a session that used
them, or prompted for an older OpenCode), where OpenCode 1.18 would answer ``invalid``: both
only read (the project's file names, the session's todos) under their own permission, and the
answer costs the model less than a failed step. Of OpenCode's experimental tools only ``lsp``
is hosted, listed and offered where its switch is on (``ToolSettings``); ``plan_exit`` and code
mode's ``execute`` are not, and their switches list nothing."""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import Tool
from app.runtime.tools._bash import Bash
from app.runtime.tools._files import Edit, Glob, Grep, List, Read, Write
from app.runtime.tools._invalid import NAME as INVALID
from app.runtime.tools._invalid import Invalid
from app.runtime.tools._lsp import Lsp
from app.runtime.tools._patch import ApplyPatch
from app.runtime.tools._question import Question
from app.runtime.tools._settings import ToolSettings
from app.runtime.tools._skills import SkillTool
from app.runtime.tools._task import Task
from app.runtime.tools._todo import TodoRead, TodoWrite
from app.runtime.tools._webfetch import WebFetch
from app.runtime.tools._websearch import WebSearch

BUILT_IN: list[Tool] = [
    Invalid(),
    Question(),
    Bash(),
    Read(),
    Glob(),
    Grep(),
    Edit(),
    Write(),
    Task(),
    WebFetch(),
    TodoWrite(),
    WebSearch(),
    SkillTool(),
    ApplyPatch(),
    Lsp(),
]
RETIRED: list[Tool] = [List(), TodoRead()]

# Every tool a call may name (what runs), built-in ones first.
TOOLS: dict[str, Tool] = {tool.name: tool for tool in (*BUILT_IN, *RETIRED)}

# What a model may be offered: the built-in tools but ``invalid`` (``lsp`` under its switch).
OFFERED = [tool.name for tool in BUILT_IN if tool.name != INVALID]

DEFAULT_SETTINGS = ToolSettings()


def ids(settings: ToolSettings = DEFAULT_SETTINGS) -> list[str]:
    """``GET /experimental/tool/ids``: OpenCode's list for the same switches (``websearch`` is
    listed whether or not it is enabled, as there)."""
    hidden = {name for name, on in (("question", settings.question), ("lsp", settings.lsp_tool)) if not on}
    return [tool.name for tool in BUILT_IN if tool.name not in hidden]


def uses_patch(model_id: str) -> bool:
    """OpenCode gives GPT-family models (but not gpt-4* or gpt-oss) apply_patch instead of edit/write."""
    return "gpt-" in model_id and "oss" not in model_id and "gpt-4" not in model_id


def offered_for(model_id: str, provider_id: str = "", settings: ToolSettings = DEFAULT_SETTINGS) -> list[str]:
    """The tools a model is offered (before permissions): apply_patch or edit/write, never both;
    websearch where it is enabled."""
    hidden = {"edit", "write"} if uses_patch(model_id) else {"apply_patch"}
    if not settings.websearch_offered(provider_id):
        hidden.add("websearch")
    return [name for name in ids(settings) if name != INVALID and name not in hidden]


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


def listing(model_id: str, provider_id: str = "", settings: ToolSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    """``GET /experimental/tool``: what a model gets (``invalid`` included, as OpenCode lists it),
    each with its JSON schema."""
    names = [INVALID, *offered_for(model_id, provider_id, settings)]
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
