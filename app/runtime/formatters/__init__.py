"""Formatters: OpenCode 1.18's code formatters (``formatter`` in opencode.json), which of them are
enabled for a project, and running them on a file a tool wrote.

May import: ``app.config``, ``app.processes``. Nothing else of the runtime: the tools domain calls
``Formatters.format`` after a write, the routers ``status``.
Invariant: formatting never fails the tool that asked: a formatter that cannot start, fails or
hangs (bounded) is logged and the file stays as it was written; with ``formatter`` off nothing
is looked up or run.
"""

from app.runtime.formatters._service import Formatters, FormatterStatus

__all__ = ["FormatterStatus", "Formatters"]
