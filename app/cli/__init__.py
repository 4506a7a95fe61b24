"""``opensession`` command line: a dispatcher; each command lives in its own module (``serve``,
``run``, ``sessions``, ``usage``, ``export``/``import``, ``mcp``) and registers its own arguments.

argparse (stdlib) rather than a CLI framework, and every module imports only the standard library
at the top: start-up time of ``serve`` is a tracked target, so client-side libraries (httpx, rich)
are imported inside the commands that use them."""

from __future__ import annotations

import argparse
import os
import sys

from app import __version__
from app.cli import fleet, run, serve, sessions, transfer, usage
from app.cli.common import CliError

COMMANDS = (serve, run, sessions, usage, transfer, fleet)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opensession", description="OpenCode-compatible agent session server")
    parser.add_argument("--version", action="version", version=f"opensession {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return parser


def _keep_bytecode() -> None:
    """Cache compiled modules even where the environment asks Python not to
    (``PYTHONDONTWRITEBYTECODE``, common in containers and sandboxes): without the cache every
    start compiles the server's own modules again, a large part of a start-up whose time is
    tracked. Where the package directory is read-only, Python skips the write."""
    sys.dont_write_bytecode = False


def main(argv: list[str] | None = None) -> int:
    _keep_bytecode()
    args = _parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except CliError as exc:
        print(f"opensession: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
