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

The record cannot be written before ``git worktree add`` has made the worktree's git directory,
so each add is journaled first, beside the worktrees (``<home>/.<name>.adding``: the fill and the
request that asked for it), under a ``flock`` its maker holds until the fill's own record and the
request's mark are written. A journal whose lock is free is an add cut short: if git lists the
worktree, the record and the mark are written as its maker would have, and it is filled like any
other fill cut short (and a keyed retry recognises it); if not, what git had begun of the tree's
directory is removed. Either way the journal then goes.

Whether git finished an add is read from the worktree's administrative directory, not from
``git worktree list``: a git killed mid-add can leave that directory half written (an empty
``commondir``), and git then refuses every worktree command in the repository until it is gone."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from app.jsonutil import dumps, loads
from app.runtime.worktrees._git import drop_note, note_path, read_note, write_note
from app.runtime.worktrees._requests import RequestMark
from app.wire import Worktree

ADDING = ".adding"  # the suffix of an add's journal, ``.<name>.adding`` in the project's home
FILL_PENDING = "opensession-fill.json"
FILL_LOCK = "opensession-fill.lock"
GIT_INDEX_LOCK = "index.lock"  # what a git killed while it wrote the index leaves behind
# ``git worktree add`` writes these in the worktree's administrative directory, ``locked`` first,
# and deletes ``locked`` as its last step: while it is there, the add has not finished.
GIT_ADMIN_FILES = ("gitdir", "commondir", "HEAD")
GIT_ADDING = "locked"
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


def _locked(path: Path, flags: int) -> int | None:
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
    descriptor = None if path is None else _locked(path, os.O_CREAT)
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
    trees = (path for home in homes for path in home.glob("*") if not path.name.endswith(ADDING))
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


def journal_path(tree: Path) -> Path:
    return tree.with_name(f".{tree.name}{ADDING}")


class Adding:
    """The journal of one add, locked by the process adding the worktree."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    def write(self, fill: PendingFill, request: RequestMark | None) -> None:
        """Blocking."""
        entry = {"fill": asdict(fill), "request": None if request is None else asdict(request)}
        os.write(self._descriptor, dumps(entry).encode())

    def release(self) -> None:
        """Let go of the journal, leaving it to be found cut short. Idempotent."""
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1

    def settle(self) -> None:
        """The add is recorded as a fill (or undone): the journal goes. Blocking."""
        if self._descriptor >= 0:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.release()


def begin_add(tree: Path) -> Adding | None:
    """The journal of adding ``tree``, new and locked; None when one exists (another add of that
    name, or one cut short and not settled yet). Blocking."""
    path = journal_path(tree)
    descriptor = _locked(path, os.O_CREAT | os.O_EXCL)
    return None if descriptor is None else Adding(path, descriptor)


@dataclass(frozen=True, slots=True)
class AddCutShort:
    journal: Adding  # locked by the finder
    fill: PendingFill | None  # None: the maker died before it wrote the journal (nothing added)
    request: RequestMark | None


def adds_cut_short(homes: list[Path]) -> list[AddCutShort]:
    """The adds of worktrees in ``homes`` whose maker let go of their journal without settling
    it (it died), each with the journal's lock taken. Blocking."""
    found: list[AddCutShort] = []
    for path in sorted(path for home in homes for path in home.glob(f".*{ADDING}")):
        descriptor = _locked(path, 0)
        if descriptor is None:
            continue  # an add under way, or one another finder took
        journal = Adding(path, descriptor)
        try:
            entry = loads(path.read_text())
        except (OSError, ValueError):
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


def drop_begun(common: Path, tree: Path, journal: Adding) -> None:
    """Remove the administrative directory and the tree's directory that an unfinished add left.
    The tree is only removed from the journal's own project home, where the journal put it.
    Blocking."""
    admin = _admin_dir(common, tree)
    if admin is not None:
        shutil.rmtree(admin, ignore_errors=True)
    if tree.parent == journal.path.parent:
        shutil.rmtree(tree, ignore_errors=True)
