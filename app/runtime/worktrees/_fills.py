"""The fill of a new worktree, journaled so that a stop or crash does not leave it empty.

A worktree is added without a checkout and filled in the background (``git reset --hard``, then
the start commands). A server killed in between left a listed worktree with no files, which
nothing filled again. So the fill is recorded in the worktree's own git directory before the
request is answered and removed once the fill has ended; the next start of a process with the
same data directory fills again every worktree whose record is still there (a reset is safe to
repeat), start commands included, since they had not run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from app.runtime.worktrees._git import drop_note, read_note, write_note
from app.wire import Worktree

FILL_PENDING = "opensession-fill.json"


@dataclass(frozen=True, slots=True)
class PendingFill:
    made: Worktree
    main: str  # the main tree of the repository
    start_command: str  # the request's own, run after the project's


def record(fill: PendingFill) -> None:
    """Blocking: run on a thread."""
    write_note(fill.made["directory"], FILL_PENDING, asdict(fill))


def done(tree: str) -> None:
    """Blocking: run on a thread."""
    drop_note(tree, FILL_PENDING)


def pending(root: Path) -> list[PendingFill]:
    """The fills cut short of the worktrees under ``root`` (``<project id>/<name>``). Blocking."""
    saved = (read_note(str(tree), FILL_PENDING) for tree in sorted(root.glob("*/*")))
    return [PendingFill(**fill) for fill in saved if fill]
