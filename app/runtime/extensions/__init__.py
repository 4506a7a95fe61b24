"""Extensions: the MCP servers configured in opencode.json (``mcp``) or added at run time, their
connections per project directory, and their tools as the turn offers them.

May import: the tools domain (MCP tools implement its ``Tool`` protocol), the runtime kernel,
``app.config``, the store (run-time changes a cluster shares). The ``mcp`` SDK is imported on
first use, never at import time.
Invariant: a broken server (cannot start, crashes, hangs) costs a bounded wait and a ``failed``
status, never a stuck turn or an orphan process; ``stop`` ends every connection.
"""

from app.runtime.extensions._servers import Extensions
from app.runtime.extensions._shared import OneProcess, SharedChanges
from app.runtime.extensions._tools import McpTool

__all__ = ["Extensions", "McpTool", "OneProcess", "SharedChanges"]
