"""The fill of a new worktree, journaled so that a stop or crash does not leave it empty.

A worktree is added without a checkout and filled in the background (``git reset --hard``, then
the start commands). A server killed in between left a listed worktree with no files, which
nothing filled again. So the fill is recorded in the worktree's own git directory before the
request is answered and removed once the fill has ended; the next start of a process with the
same data directory fills again every worktree whose record is still there (a reset is safe to
repeat), start commands included, since they had not run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from app.jsonutil import dumps, loads
from app.runtime.worktrees._git import own_git_dir
from app.wire import Worktree

FILL_PENDING = "opensession-fill.json"


@dataclass(frozen=True, slots=True)
class PendingFill:
    made: Worktree
    main: str  # the main tree of the repository
    start_command: str  # the request's own, run after the project's


def record(fill: PendingFill) -> None:
    """Blocking: run on a thread."""
    git_dir = own_git_dir(fill.made["directory"])
    if git_dir is not None:
        (git_dir / FILL_PENDING).write_text(dumps({"made": fill.made, "main": fill.main, "start": fill.start_command}))


def done(tree: str) -> None:
    """Blocking: run on a thread."""
    git_dir = own_git_dir(tree)
    if git_dir is not None:
        with contextlib.suppress(FileNotFoundError):
            (git_dir / FILL_PENDING).unlink()


def pending(root: Path) -> list[PendingFill]:
    """The fills cut short of the worktrees under ``root`` (``<project id>/<name>``). Blocking."""
    found = []
    for tree in sorted(root.glob("*/*")):
        git_dir = own_git_dir(str(tree))
        try:
            saved = loads((git_dir / FILL_PENDING).read_text()) if git_dir is not None else None
        except (OSError, ValueError):
            continue
        if saved:
            found.append(PendingFill(saved["made"], saved["main"], saved["start"]))
    return found
