"""A small real MCP server for tests/tools/test_mcp.py, written with the ``mcp`` SDK.

Run as ``python tests/mcp_server.py stdio`` (over stdin/stdout) or ``... http PORT`` (streamable
HTTP on loopback, ``/mcp``; SSE on ``/sse``). Its tools cover what the client must handle: plain
text, an image, an embedded resource, a crash in the middle of a call, and a call that never ends.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("testmcp")

# A 1x1 transparent PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100ffff03000006000557bfabd40000000049454e44ae426082"
)


@server.resource("notes://readme", name="read me", description="The project notes", mime_type="text/plain")
def readme() -> str:
    return "hello from a resource"


@server.prompt(description="Review a file")
def review(path: str, focus: str) -> str:
    return f"Review {path}, looking at {focus}."


@server.tool(description="Add two integers")
def add(a: int, b: int) -> str:
    return f"sum={a + b}"


@server.tool(description="Say two things (two text blocks)")
def say(first: str, second: str) -> list[str]:
    return [first, second]


@server.tool(description="A tiny picture")
def pixel() -> Image:
    return Image(data=PIXEL, format="png")


@server.tool(description="The environment variable's value")
def env(name: str) -> str:
    return os.environ.get(name, "<unset>")


@server.tool(description="Fail as a tool (isError)")
def broken() -> str:
    raise ValueError("broken on purpose")


@server.tool(description="Add a tool to this server")
def grow() -> str:
    server.add_tool(lambda: "grown here", name="grown", description="Added at run time")
    return "added grown"


@server.tool(description="Exit the process in the middle of the call")
def crash() -> str:
    os._exit(3)


@server.tool(description="Never answer")
async def hang() -> str:
    await asyncio.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["sse"]:
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
