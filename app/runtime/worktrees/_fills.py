"""The fill of a new worktree, journaled so that a stop or crash does not leave it empty, and
claimed so that one process fills it.

A worktree is added without a checkout and filled in the background (``git reset --hard``, then
the start commands). A server killed in between left a listed worktree with no files, which
nothing filled again. So the fill is recorded in the worktree's own git directory before the
request is answered and removed once the fill has ended, and the filler holds an exclusive
``flock`` on a lock file beside the record for as long as it fills. The kernel drops that lock
when its holder dies, so a record whose lock is free is a fill cut short: every process that can
reach the worktree (it shares the data directory) looks for such records at its start and every
``SWEEP_SECONDS`` after, and whoever takes the lock first fills again (a reset is safe to
repeat, once the ``index.lock`` a killed git left is dropped), start commands included, since
they had not run. Two processes never fill one worktree at once.

The record cannot be written before ``git worktree add`` has made the worktree's git directory:
the add before it is journaled on its own (``_adds``)."""

from __future__ import annotations

import fcntl
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from app.runtime.worktrees._git import drop_note, note_path, read_note, write_note
from app.wire import Worktree

FILL_PENDING = "opensession-fill.json"
FILL_LOCK = "opensession-fill.lock"
GIT_INDEX_LOCK = "index.lock"  # what a git killed while it wrote the index leaves behind
SWEEP_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class PendingFill:
    made: Worktree
    main: str  # the main tree of the repository
    start_command: str  # the request's own, run after the project's


class FillClaim:
    """The right to change one worktree's files (fill it, or reset it): an open lock file with
    an exclusive ``flock`` on it."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor

    def release(self) -> None:
        """Idempotent; a close, quick enough for the event loop (and safe in a ``finally``)."""
        if self._descriptor >= 0:
            os.close(self._descriptor)  # closing drops the lock
            self._descriptor = -1


def locked(path: Path, flags: int) -> int | None:
    """``path`` opened with an exclusive ``flock`` taken; None when it cannot be opened or
    another holds the lock."""
    try:
        descriptor = os.open(path, flags | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def claim(tree: str) -> FillClaim | None:
    """The claim on ``tree``'s fill; None while another process (or task) holds it, or when the
    tree is no worktree any more. Blocking."""
    path = note_path(tree, FILL_LOCK)
    descriptor = None if path is None else locked(path, os.O_CREAT)
    return None if descriptor is None else FillClaim(descriptor)


def drop_stale_git_lock(tree: str) -> None:
    """Under ``tree``'s claim, which every change of its files takes (a fill, a reset): an
    ``index.lock`` there was left by a git killed with the process that held the claim before.
    Blocking."""
    drop_note(tree, GIT_INDEX_LOCK)


def record(fill: PendingFill) -> None:
    """Blocking: run on a thread."""
    write_note(fill.made["directory"], FILL_PENDING, asdict(fill))


def done(tree: str) -> None:
    """Blocking: run on a thread."""
    drop_note(tree, FILL_PENDING)


def claim_cut_short(homes: list[Path]) -> list[tuple[PendingFill, FillClaim]]:
    """The fills cut short of the worktrees in ``homes`` (projects' worktree directories), each
    with its claim taken: a record whose lock is held is a fill in progress. Blocking."""
    found: list[tuple[PendingFill, FillClaim]] = []
    trees = (path for home in homes for path in home.glob("*") if not path.name.startswith("."))
    for tree in sorted(str(path) for path in trees):
        if read_note(tree, FILL_PENDING) is None or (held := claim(tree)) is None:
            continue
        saved = read_note(tree, FILL_PENDING)  # again: the filler may have ended just before
        if saved is None:
            held.release()
            continue
        drop_stale_git_lock(tree)
        found.append((PendingFill(**saved), held))
    return found
