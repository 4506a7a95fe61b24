"""The agent's tools, with OpenCode's names and parameter names so models prompted for OpenCode
work unchanged, and the state they keep between calls (todo lists) and the events they announce.

May import: the runtime kernel (``abort``, ``errors``), events, store. Tools never reach other
domains: what they need (asking permission, running a sub-agent) arrives through ``ToolContext``.
Invariant: a tool acts inside the session's directory only; an escape needs a permission.
"""

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, truncate
from app.runtime.tools._bash import Bash
from app.runtime.tools._files import attachment, read_path
from app.runtime.tools._registry import OFFERED, TOOLS, function_specs, ids, listing, offered_for, repair
from app.runtime.tools._settings import ToolSettings
from app.runtime.tools._skills import Skills, available_text
from app.runtime.tools._state import FileEdits, TodoStore, ToolServices

__all__ = [
    "OFFERED",
    "TOOLS",
    "Bash",
    "FileEdits",
    "Skills",
    "TodoStore",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolServices",
    "ToolSettings",
    "attachment",
    "available_text",
    "function_specs",
    "ids",
    "listing",
    "offered_for",
    "read_path",
    "repair",
    "truncate",
]
