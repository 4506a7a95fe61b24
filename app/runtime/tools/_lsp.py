"""lsp: OpenCode 1.18's experimental code-intelligence tool (offered under
``OPENCODE_EXPERIMENTAL_LSP_TOOL``, see ``ToolSettings``): definitions, references, hover, symbols,
implementations and call hierarchies from the file's language servers, as their JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema
from app.runtime.tools._paths import relative, target

OPERATIONS = (
    "goToDefinition",
    "findReferences",
    "hover",
    "documentSymbol",
    "workspaceSymbol",
    "goToImplementation",
    "prepareCallHierarchy",
    "incomingCalls",
    "outgoingCalls",
)
# What workspaceSymbol keeps (OpenCode's): classes, functions, methods, interfaces, variables,
# constants, structs and enums, at most 10 per server.
SYMBOL_KINDS = frozenset({5, 12, 6, 11, 13, 14, 23, 10})
_AT_POSITION = {
    "goToDefinition": "textDocument/definition",
    "findReferences": "textDocument/references",
    "hover": "textDocument/hover",
    "goToImplementation": "textDocument/implementation",
    "prepareCallHierarchy": "textDocument/prepareCallHierarchy",
}

DESCRIPTION = """Interact with Language Server Protocol (LSP) servers to get code intelligence features.

Supported operations:
- goToDefinition: Find where a symbol is defined
- findReferences: Find all references to a symbol
- hover: Get hover information (documentation, type info) for a symbol
- documentSymbol: Get all symbols (functions, classes, variables) in a document
- workspaceSymbol: List project-wide symbols matching a query string
- goToImplementation: Find implementations of an interface or abstract method
- prepareCallHierarchy: Get call hierarchy item at a position (functions/methods)
- incomingCalls: Find all functions/methods that call the function at a position
- outgoingCalls: Find all functions/methods called by the function at a position

All operations require:
- filePath: The file to operate on
- line: The line number (1-based, as shown in editors)
- character: The character offset (1-based, as shown in editors)

workspaceSymbol also accepts:
- query: A query string to filter symbols by. Empty string requests all symbols.

For workspaceSymbol, filePath is not sent in the LSP workspace/symbol request. It is used by opencode to select and start the matching LSP server.

Note: LSP servers must be configured for the file type. If no server is available, an error will be returned.
"""  # noqa: E501  (OpenCode's wording)


def _flat(answers: list[Any]) -> list[Any]:
    """Every server's answer in one list, without the empty ones (as OpenCode flattens them)."""
    found: list[Any] = []
    for answer in answers:
        found.extend(item for item in (answer if isinstance(answer, list) else [answer]) if item)
    return found


class Lsp:
    name = "lsp"
    description = DESCRIPTION
    parameters = schema(
        {
            "operation": {"type": "string", "enum": list(OPERATIONS), "description": "The LSP operation to perform"},
            "filePath": {"type": "string", "description": "The absolute or relative path to the file"},
            "line": {"type": "integer", "minimum": 1, "description": "The line number (1-based, as shown in editors)"},
            "character": {
                "type": "integer",
                "minimum": 1,
                "description": "The character offset (1-based, as shown in editors)",
            },
            "query": {
                "type": "string",
                "description": "Search query for workspaceSymbol. Empty string requests all symbols.",
            },
        },
        ["operation", "filePath", "line", "character"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        operation = require(args, "operation")
        if operation not in OPERATIONS:
            raise ToolError(f"The operation parameter must be one of {', '.join(OPERATIONS)}")
        line, character = args.get("line"), args.get("character")
        if not isinstance(line, int) or not isinstance(character, int) or line < 1 or character < 1:
            raise ToolError("line and character are required and must be integers of at least 1")
        path = (await target(ctx, require(args, "filePath"))).path
        asked: dict[str, Any] = {"operation": operation}
        if operation != "workspaceSymbol":
            asked["filePath"] = str(path)
        if operation not in ("workspaceSymbol", "documentSymbol"):
            asked |= {"line": line, "character": character}
        await ctx.ask("lsp", ["*"], ["*"], asked)
        rel = relative(path, ctx.directory.resolve())
        where = (
            ""
            if operation == "workspaceSymbol"
            else rel
            if operation == "documentSymbol"
            else f"{rel}:{line}:{character}"
        )
        title = f"{operation} {where}" if where else operation
        lsp, directory = ctx.services.lsp, ctx.session["directory"]
        if not path.exists():
            raise ToolError(f"File not found: {path}")
        if lsp is None or not await lsp.has_clients(directory, path):
            raise ToolError("No LSP server available for this file type.")
        await lsp.touch(directory, path, wait=True)
        result = await self._ask_servers(ctx, operation, path, line - 1, character - 1, args.get("query"))
        output = f"No results found for {operation}" if not result else json.dumps(result, indent=2, ensure_ascii=False)
        return ToolResult(output, title=title, metadata={"result": result})

    async def _ask_servers(
        self, ctx: ToolContext, operation: str, path: Path, line: int, character: int, query: Any
    ) -> list[Any]:
        lsp, directory = ctx.services.lsp, ctx.session["directory"]
        assert lsp is not None
        document = {"uri": path.as_uri()}
        position = {"textDocument": document, "position": {"line": line, "character": character}}
        if operation == "documentSymbol":
            return _flat(await lsp.request(directory, path, "textDocument/documentSymbol", {"textDocument": document}))
        if operation == "workspaceSymbol":
            answers = await lsp.request(directory, path, "workspace/symbol", {"query": query or ""})
            kept = [[s for s in a if isinstance(s, dict) and s.get("kind") in SYMBOL_KINDS][:10] for a in answers if a]
            return _flat(kept)
        if operation == "findReferences":
            params = {**position, "context": {"includeDeclaration": True}}
            return _flat(await lsp.request(directory, path, "textDocument/references", params))
        if operation in ("incomingCalls", "outgoingCalls"):
            method = f"callHierarchy/{operation}"
            found: list[Any] = []
            for items in await lsp.request(directory, path, "textDocument/prepareCallHierarchy", position):
                if isinstance(items, list) and items:
                    found.extend(_flat(await lsp.request(directory, path, method, {"item": items[0]})))
            return found
        answers = await lsp.request(directory, path, _AT_POSITION[operation], position)
        return answers if operation == "hover" else _flat(answers)  # hover: each server's answer, as there
