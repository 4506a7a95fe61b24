"""The removal of a worktree, journaled so that a process killed midway leaves nothing that
nothing finishes.

A removal is several steps: ``git worktree remove``, what git left of the tree's directory, the
branch, and the project's list of worktrees. A process killed between them left the branch (or
the list's entry) behind, and the request's retry, finding no worktree, answered that it was
removed. So each removal is journaled first (``_journal``: ``<home>/.<name>.removing``, naming
the main tree, the tree and its branch), locked by its maker until every step is done. A journal
whose lock is free is a removal cut short: the request's retry, or the sweep of any process
sharing the data directory, does the steps left, then settles it.

While the journal is there, no new worktree gets the name: whoever finishes the removal would
remove that one."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from app.runtime.worktrees import _journal as journals
from app.runtime.worktrees._journal import Journal

REMOVING = ".removing"  # the suffix of a removal's journal, ``.<name>.removing`` in the project's home


@dataclass(frozen=True, slots=True)
class Removal:
    main: str  # the main tree of the repository
    tree: str  # the worktree, as the project lists it
    real: str  # its real path, in the project's home
    branch: str | None  # its branch's short name; None for a detached worktree


def begin_removal(removal: Removal) -> Journal | None:
    """The journal of ``removal``, written and locked; None when the tree has one already (a
    removal under way, or one cut short). Raises ``OSError`` (nothing journaled) when the
    journal cannot be written. Blocking."""
    journal = journals.begin(Path(removal.real), REMOVING)
    if journal is not None:
        try:
            journal.write(asdict(removal))
        except OSError:
            journal.settle()
            raise
    return journal


def removing(tree: Path) -> bool:
    """Whether a removal of ``tree`` (a real path in a project's home) is journaled. Blocking."""
    return os.path.lexists(journals.journal_path(tree, REMOVING))


def removals_cut_short(homes: list[Path]) -> list[tuple[Journal, Removal | None]]:
    """The removals of worktrees in ``homes`` whose maker died before it settled their journal,
    each with the journal's lock taken (None: it died before it wrote it, and so before any
    step). Blocking."""
    return [
        (journal, None if entry is None else Removal(**entry)) for journal, entry in journals.cut_short(homes, REMOVING)
    ]
