"""MCP tools as the turn sees them: ``<server>_<tool>`` (sanitized as OpenCode does), the
server's JSON schema, a permission asked under the tool's name (so ``"myserver_*": "ask"``
applies), and the result turned into output and attachments the way OpenCode does it: text
blocks (and text resources) joined by blank lines, images, audio and binary resources as file
attachments (data URLs)."""

from __future__ import annotations

from typing import Any

from app.runtime.extensions._connection import CallFailed, Connection
from app.runtime.extensions._spec import sanitize
from app.runtime.tools import ToolContext, ToolError, ToolResult, truncate


def tool_name(server: str, tool: str) -> str:
    return f"{sanitize(server)}_{sanitize(tool)}"


class McpTool:
    """Implements the tools domain's ``Tool`` protocol for one tool of one connected server."""

    def __init__(self, connection: Connection, definition: Any) -> None:
        self.connection = connection
        self.tool = definition.name
        self.name = tool_name(connection.spec.name, definition.name)
        self.description = definition.description or ""
        schema = dict(definition.input_schema or {})
        # As OpenCode: always an object, properties present, nothing beyond them.
        self.parameters = {**schema, "type": "object", "properties": schema.get("properties") or {}}
        self.parameters["additionalProperties"] = False

    @property
    def function_spec(self) -> dict[str, Any]:
        """The OpenAI function-tool description the model is offered."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        await ctx.ask(self.name, ["*"], ["*"], {})
        try:
            result = await ctx.signal.race(self.connection.call(self.tool, args))
        except CallFailed as exc:
            raise ToolError(str(exc)) from exc
        # A result flagged isError is still the tool's answer (OpenCode shows it as output too).
        output, attachments = render(result.content)
        text, truncated = truncate(output)
        return ToolResult(text, metadata={"truncated": truncated}, attachments=attachments)


def render(content: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    texts: list[str] = []
    files: list[dict[str, Any]] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            files.append(
                {"type": "file", "mime": block.mime_type, "url": f"data:{block.mime_type};base64,{block.data}"}
            )
        elif kind == "resource":
            resource = block.resource
            if getattr(resource, "text", None) is not None:
                texts.append(resource.text)
            blob = getattr(resource, "blob", None)
            if blob is not None:
                mime = resource.mime_type or "application/octet-stream"
                files.append(
                    {"type": "file", "mime": mime, "url": f"data:{mime};base64,{blob}", "filename": str(resource.uri)}
                )
    return "\n\n".join(texts), files


def _file(mime: str, data: str) -> dict[str, Any]:
    return {"type": "file", "mime": mime, "url": f"data:{mime};base64,{data}"}
