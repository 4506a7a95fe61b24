"""``opensession mcp --node NAME=URL ...``: an MCP server over stdio that lets another agent drive
sessions on one or more opensession (or OpenCode 1.x) servers, one long-lived session per node.

This module only parses the command line (standard library): the MCP SDK and httpx are imported
when the command runs, since ``serve``'s start-up time is tracked and every command module is
imported at start."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

from app.cli.common import CliError

DEFAULT_WAIT_SECONDS = 60.0


def register(commands: Any) -> None:
    mcp = commands.add_parser("mcp", help="an MCP server (stdio) driving sessions on opensession/OpenCode servers")
    mcp.add_argument(
        "--node",
        action="append",
        required=True,
        metavar="NAME=URL",
        help="a server to drive, e.g. a=http://127.0.0.1:4096 (repeatable)",
    )
    mcp.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long send_message waits for the reply by default (default {DEFAULT_WAIT_SECONDS:g})",
    )
    mcp.set_defaults(handler=main)


def parse_nodes(values: list[str]) -> dict[str, str]:
    """``NAME=URL`` pairs as {name: url}; names are unique and URLs are http(s)."""
    nodes: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        name, url = name.strip(), url.strip().rstrip("/")
        if not sep or not name or not url:
            raise CliError(f"--node takes NAME=URL, got {value!r}")
        if name in nodes:
            raise CliError(f"--node {name} is given twice")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CliError(f"--node {name}: not an http(s) URL: {url!r}")
        nodes[name] = url
    return nodes


def main(args: argparse.Namespace) -> int:
    if args.wait < 0:
        raise CliError("--wait must be zero or more seconds")
    nodes = parse_nodes(args.node)
    from app.cli.fleet.server import serve_stdio

    serve_stdio(nodes, default_wait=args.wait)
    return 0
