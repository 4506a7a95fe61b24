"""A journal of one change to a worktree (its add, its removal), beside the project's worktrees,
so that a process killed midway leaves something that says what to finish.

A journal is a file ``<home>/.<name><suffix>`` holding one JSON entry, locked with an exclusive
``flock`` by the process making the change for as long as it runs. The kernel drops the lock when
its holder dies, so a journal whose lock is free is a change cut short: whoever takes the lock
finishes it (or undoes it), then settles the journal, which deletes it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from app.jsonutil import dumps, loads
from app.runtime.worktrees._fills import locked


def journal_path(tree: Path, suffix: str) -> Path:
    return tree.with_name(f".{tree.name}{suffix}")


class Journal:
    """One journal, locked by the process that made it or found it cut short."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    def write(self, entry: dict[str, Any]) -> None:
        """Blocking."""
        os.write(self._descriptor, dumps(entry).encode())

    def release(self) -> None:
        """Let go of the journal, leaving it to be found cut short. Idempotent."""
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1

    def settle(self) -> None:
        """The change is done (or undone): the journal goes. Blocking."""
        if self._descriptor >= 0:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.release()


def begin(tree: Path, suffix: str) -> Journal | None:
    """A new journal of a change to ``tree``, locked; None when one exists (the same change under
    way, or one cut short and not settled yet). Blocking."""
    path = journal_path(tree, suffix)
    descriptor = locked(path, os.O_CREAT | os.O_EXCL)
    return None if descriptor is None else Journal(path, descriptor)


def cut_short(homes: list[Path], suffix: str) -> list[tuple[Journal, dict[str, Any] | None]]:
    """The journals ending in ``suffix`` in ``homes`` whose maker let go of them without settling
    them (it died), each with its lock taken and its entry (None: the maker died before it wrote
    one). Blocking."""
    found: list[tuple[Journal, dict[str, Any] | None]] = []
    for path in sorted(path for home in homes for path in home.glob(f".*{suffix}")):
        descriptor = locked(path, 0)
        if descriptor is None:
            continue  # a change under way, or one another finder took
        try:
            entry = loads(path.read_text())
        except (OSError, ValueError):
            entry = None
        found.append((Journal(path, descriptor), entry if isinstance(entry, dict) else None))
    return found
