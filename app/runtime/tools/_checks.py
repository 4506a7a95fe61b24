"""What follows a write, edit or apply_patch, in one place so the order holds everywhere: the
project's formatters run on each written file, then its language servers are told and waited
for (bounded), and their diagnostics come back for the tool's result (OpenCode 1.18's order:
the diagnostics are those of the formatted text).

Nothing here fails the tool: a formatter or a language server that breaks is logged by its
domain and the write stands.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from app.config import ConfigError
from app.runtime.lsp import Diagnostic, report
from app.runtime.tools._base import ToolContext

log = logging.getLogger("opensession.tools")

MAX_OTHER_FILES = 5  # a write names the errors of at most this many other files
THIS_FILE = "\n\nLSP errors detected in this file, please fix:\n"
OTHER_FILES = "\n\nLSP errors detected in other files:\n"


@dataclass(slots=True)
class Checked:
    formatted: set[Path] = field(default_factory=set)  # files a formatter ran on
    # Every file the language servers know, with its diagnostics (the part's
    # ``metadata.diagnostics``); empty with ``lsp`` off.
    diagnostics: dict[str, list[Diagnostic]] = field(default_factory=dict)


async def after_write(ctx: ToolContext, paths: list[Path]) -> Checked:
    """Format ``paths`` (each in turn), then touch them and wait for their diagnostics."""
    services, directory = ctx.services, ctx.session["directory"]
    checked = Checked()
    try:
        if services.formatters is not None and services.formatters.enabled(directory):
            for path in paths:
                if await services.formatters.format(directory, path):
                    checked.formatted.add(path)
        if services.lsp is not None and services.lsp.enabled(directory):
            await asyncio.gather(*(services.lsp.touch(directory, path, wait=True) for path in paths))
            checked.diagnostics = services.lsp.diagnostics(directory)
    except ConfigError as exc:  # the turn read the same files already: only a race gets here
        log.warning("no formatting or diagnostics after a write in %s: %s", directory, exc)
    return checked


def warm(ctx: ToolContext, path: Path) -> None:
    """A file was read: its language servers start meanwhile (nothing is waited for)."""
    lsp, directory = ctx.services.lsp, ctx.session["directory"]
    try:
        if lsp is not None and lsp.enabled(directory):
            lsp.warm(directory, path)
    except ConfigError:
        pass


def errors(path: Path, checked: Checked, header: str = THIS_FILE) -> str:
    """The errors of ``path`` under ``header`` for a tool's output ('' when it has none)."""
    block = report(str(path), checked.diagnostics.get(str(path), []))
    return header + block if block else ""


def after_write_output(path: Path, checked: Checked) -> str:
    """What a write adds to its output: the errors of every file that has some, in the order
    the servers reported them, the written file under its own header and at most
    ``MAX_OTHER_FILES`` others."""
    text, others = "", 0
    for file, diagnostics in checked.diagnostics.items():
        mine = file == str(path)
        if not mine and others >= MAX_OTHER_FILES:
            continue
        block = report(file, diagnostics)
        if not block:
            continue
        if mine:
            text += THIS_FILE + block
        else:
            others += 1
            text += OTHER_FILES + block
    return text
