"""The add of a new worktree, journaled so that a process killed mid-add leaves nothing that
nothing finishes.

The fill's record (``_fills``) lives in the worktree's git directory, which only exists once
``git worktree add`` has made it, and a process killed before it wrote the record left a
worktree nothing filled or listed, that its request's retry did not recognise. So each add is
journaled first (``_journal``: ``<home>/.<name>.adding``, holding the fill and the request that
asked for it), locked by its maker until the fill's record and the request's mark are written. A
journal whose lock is free is an add cut short: if git finished adding the worktree, the record
and the mark are written as its maker would have, and it is filled like any other fill cut short
(and a keyed retry recognises it); if not, what git began is removed. Either way the journal then
goes.

Whether git finished is read from the worktree's administrative directory, not from
``git worktree list``: a git killed mid-add can leave that directory half written (an empty
``commondir``, seen with git 2.39), and git then refuses every worktree command in the repository
until it is gone."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from app.runtime.worktrees import _journal as journals
from app.runtime.worktrees._fills import PendingFill
from app.runtime.worktrees._journal import Journal
from app.runtime.worktrees._requests import RequestMark

ADDING = ".adding"  # the suffix of an add's journal, ``.<name>.adding`` in the project's home
# ``git worktree add`` writes these in the worktree's administrative directory, ``locked`` first,
# and deletes ``locked`` as its last step: while it is there, the add has not finished.
GIT_ADMIN_FILES = ("gitdir", "commondir", "HEAD")
GIT_ADDING = "locked"


def begin_add(tree: Path) -> Journal | None:
    """The journal of adding ``tree``, new and locked; None when one exists (another add of that
    name, or one cut short and not settled yet). Blocking."""
    return journals.begin(tree, ADDING)


def write(journal: Journal, fill: PendingFill, request: RequestMark | None) -> None:
    """Blocking."""
    journal.write({"fill": asdict(fill), "request": None if request is None else asdict(request)})


@dataclass(frozen=True, slots=True)
class AddCutShort:
    journal: Journal  # locked by the finder
    fill: PendingFill | None  # None: the maker died before it wrote the journal (nothing added)
    request: RequestMark | None


def adds_cut_short(homes: list[Path]) -> list[AddCutShort]:
    """The adds of worktrees in ``homes`` whose maker let go of their journal without settling
    it (it died), each with the journal's lock taken. Blocking."""
    found: list[AddCutShort] = []
    for journal, entry in journals.cut_short(homes, ADDING):
        if entry is None:
            found.append(AddCutShort(journal, None, None))
            continue
        request = entry["request"]
        found.append(AddCutShort(journal, PendingFill(**entry["fill"]), request and RequestMark(**request)))
    return found


def _admin_dir(common: Path, tree: Path) -> Path | None:
    """The administrative directory ``git worktree add`` made (or began) for ``tree``: the one
    its ``.git`` file names, else one under ``common/worktrees`` named after it (git adds a
    number when the name is taken) whose ``gitdir`` names the tree or is not written yet."""
    pointer = tree / ".git"
    if pointer.is_file() and (text := pointer.read_text()).startswith("gitdir:"):
        named = Path(tree, text.removeprefix("gitdir:").strip())
        if named.is_dir():
            return named
    for admin in sorted((common / "worktrees").glob(f"{tree.name}*")):
        if admin.name != tree.name and not admin.name.removeprefix(tree.name).isdigit():
            continue
        try:
            gitdir = (admin / "gitdir").read_text().strip()
        except OSError:
            gitdir = ""
        if not gitdir or os.path.realpath(gitdir) == os.path.realpath(pointer):
            return admin
    return None


def added_whole(common: Path, fill: PendingFill) -> Path | None:
    """The administrative directory of the worktree an add cut short was making, when git
    finished that add; None when it did not (or never began). Blocking."""
    admin = _admin_dir(common, Path(fill.made["directory"]))
    if admin is None or (admin / GIT_ADDING).exists():
        return None
    try:
        whole = all((admin / name).read_text().strip() for name in GIT_ADMIN_FILES)
    except OSError:
        return None
    return admin if whole else None


def drop_begun(common: Path, tree: Path, journal: Journal) -> None:
    """Remove the administrative directory and the tree's directory that an unfinished add left.
    The tree is only removed from the journal's own project home, where the journal put it.
    Blocking."""
    admin = _admin_dir(common, tree)
    if admin is not None:
        shutil.rmtree(admin, ignore_errors=True)
    if tree.parent == journal.path.parent:
        shutil.rmtree(tree, ignore_errors=True)
