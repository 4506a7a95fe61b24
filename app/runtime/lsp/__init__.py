"""Language servers: OpenCode 1.18's LSP integration (``lsp`` in opencode.json). Servers start
when a tool first touches a file they serve, one client per server and project root, and what
they report after a write goes back to the model in the tool's result.

May import: ``app.config``, ``app.processes``; pygls and lsprotocol, imported when a server is
first started. Nothing else of the runtime: the tools domain touches files and reads
diagnostics through ``LanguageServers``, the routers read ``status``.
Invariant: a server that cannot be found, started or initialized, crashes or hangs costs a
bounded wait and a log line, never a failed tool; every server process is tied to this
process's life and is shut down with its directory (``dispose``) or the server (``stop``);
with ``lsp`` off nothing is looked up or started.
"""

from app.runtime.lsp._client import Diagnostic, Position, Range
from app.runtime.lsp._report import report
from app.runtime.lsp._service import LSP_UPDATED, LanguageServers, LspStatus

__all__ = ["LSP_UPDATED", "Diagnostic", "LanguageServers", "LspStatus", "Position", "Range", "report"]
