"""The MCP server of ``opensession mcp``: six tools over stdio, each taking the ``node`` to act on
(optional when there is only one), built with the official ``mcp`` SDK.

Invariants: a tool call never ends the server; every anticipated failure (unknown node, a server
that cannot be reached, an HTTP error, reset while busy) is a tool result with ``isError`` and one
line; a ``send_message`` whose wait runs out is a normal result with ``timedOut`` true."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from app import __version__
from app.cli.fleet.node import Node, NodeError
from app.cli.fleet.results import Created, Interrupted, Reply, Reset, Status, Transcript

Answer = TypeVar("Answer")

DEFAULT_MESSAGES = 20
INSTRUCTIONS = (
    "Drive coding-agent sessions on OpenCode-compatible servers (nodes). Each node has one current "
    "session, created on first use. send_message prompts it and waits for the reply; when the wait "
    "runs out it answers timedOut true with the partial output, and the turn goes on: poll "
    "get_session_status / get_session_messages, or interrupt_session. reset_session starts a new "
    "session (refused while busy); create_session does so unconditionally."
)

NodeName = Annotated[
    str | None, Field(description="The node (server) to act on; may be left out when there is only one.")
]


class Fleet:
    """The nodes by name; which one a call means."""

    def __init__(self, nodes: dict[str, str], default_wait: float) -> None:
        self.nodes = {name: Node(name, url) for name, url in nodes.items()}
        self.default_wait = default_wait

    def node(self, name: str | None) -> Node:
        known = ", ".join(self.nodes)
        if name is None or name == "":
            if len(self.nodes) == 1:
                return next(iter(self.nodes.values()))
            raise ToolError(f"say which node: one of {known}")
        if name not in self.nodes:
            raise ToolError(f"unknown node {name!r}: the nodes are {known}")
        return self.nodes[name]

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.close()


async def _answer(call: Awaitable[Answer]) -> Answer:
    """A node's answer, its failure turned into the tool's error result."""
    try:
        return await call
    except NodeError as exc:
        raise ToolError(str(exc)) from None


def build(fleet: Fleet) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "opensession-fleet", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(description="Start a fresh session on the node and make it the node's current session.")
    async def create_session(node: NodeName = None) -> Created:
        return await _answer(fleet.node(node).create())

    @server.tool(
        description="Send a prompt to the node's session and wait for the reply (up to wait_seconds). "
        "On timeout the result has timedOut true, the output so far and the running tools; the turn goes on."
    )
    async def send_message(
        text: Annotated[str, Field(description="The prompt.", min_length=1)],
        node: NodeName = None,
        wait_seconds: Annotated[
            float | None, Field(description="How long to wait for the reply (default: the server's --wait).", ge=0)
        ] = None,
    ) -> Reply:
        target = fleet.node(node)
        wait = fleet.default_wait if wait_seconds is None else wait_seconds
        return await _answer(target.send(text, wait))

    @server.tool(description="Whether the node's session is idle or busy, and its id.")
    async def get_session_status(node: NodeName = None) -> Status:
        return await _answer(fleet.node(node).status())

    @server.tool(description="The node's session transcript, compact: role, text, tool names and states.")
    async def get_session_messages(
        node: NodeName = None,
        limit: Annotated[int, Field(description="At most this many latest messages.", ge=1)] = DEFAULT_MESSAGES,
    ) -> Transcript:
        return await _answer(fleet.node(node).messages(limit))

    @server.tool(description="Stop the node's running turn; the session is kept.")
    async def interrupt_session(node: NodeName = None) -> Interrupted:
        return await _answer(fleet.node(node).interrupt())

    @server.tool(description="Start a new session for the node (the old one stays on the server). Refused while busy.")
    async def reset_session(node: NodeName = None) -> Reset:
        return await _answer(fleet.node(node).reset())

    return server


async def _serve(nodes: dict[str, str], default_wait: float) -> None:
    fleet = Fleet(nodes, default_wait)
    try:
        await build(fleet).run_stdio_async()
    finally:
        await fleet.close()


def serve_stdio(nodes: dict[str, str], *, default_wait: float) -> None:
    """Serve MCP on standard input/output until the client closes it."""
    anyio.run(_serve, nodes, default_wait)
