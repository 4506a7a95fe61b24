"""A shadow git repository: OpenCode's way of recording a working tree at every step without
touching the user's own repository. Its git directory is the server's (``FileSnapshots`` says where); its
work tree is the user's repository root, and only the session directory's subtree (``.``
run from that directory) is ever added, compared or restored.

- ``track`` stages the subtree (honouring ``.gitignore`` and the user's ``info/exclude``) and
  writes a tree object: the snapshot is that tree's hash. When staging left the index file
  untouched the previous hash is reused (no ``write-tree``); on a small subtree whose
  fingerprint (``fingerprint``) has not moved since the last snapshot, git is not run at all.
  Both keep a step cheap.
- ``changed`` lists the files two snapshots differ in; ``diff`` gives their SnapshotFileDiffs;
  ``patch_text`` is the raw git diff from one snapshot to another.
- ``restore`` puts files back, each to its state in a given snapshot: checked out when the
  snapshot has it, deleted when not. Nothing else in the tree is touched.

What names a file or a snapshot comes from stored parts, which an import can plant: a snapshot
reaches git only as a hash (never an option), a restore only from a tree this repository really
recorded and only inside the session directory (``check``); a deletion never follows a symbolic
link out of it.

Blocking: each operation runs whole in one worker thread (see ``FileSnapshots``), its git
commands one after another. Invariant: an operation holds the repository's advisory file lock
from start to end (the service also serializes them within the process), so no two operations,
even from servers sharing a data directory, ever race on the shadow index. A stale
``index.lock`` found while holding the lock is left over from a crash and removed.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from app.runtime.errors import RevertFailed
from app.runtime.snapshots._git import OutOfTime, Result, git
from app.runtime.snapshots._patch import file_diff, split_patches

CHUNK = 100  # paths per command line
WHOLE_FILE = "--unified=100000000"  # context enough for one hunk spanning any file
SNAPSHOT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # a SHA-1 or SHA-256 tree hash
# The empty trees (SHA-1, SHA-256), which git answers for even where none was ever written.
EMPTY_TREES = frozenset(
    {
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321",
    }
)


Fingerprint = tuple[tuple[str, int, int, int, int], ...]

FINGERPRINT_LIMIT = 2_000  # entries; a bigger subtree is always staged by git
RACY_NS = 2_000_000_000  # a change this recent may share its timestamp with a later one


def fingerprint(directory: Path) -> Fingerprint | None:
    """Every file and folder under ``directory`` (``.git`` excluded, links not followed) with its
    modification and change times, size and inode: any edit, creation, deletion or rename
    changes it. None for a subtree too big to walk cheaply, or when an entry changed so
    recently that a further change could keep the same timestamps (git's "racy" case): then
    git is asked."""
    entries: list[tuple[str, int, int, int, int]] = []
    horizon = time.time_ns() - RACY_NS
    pending = [str(directory)]
    while pending:
        folder = pending.pop()
        try:
            scan = list(os.scandir(folder))
        except OSError:
            return None
        for entry in scan:
            if entry.name == ".git":
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return None
            if st.st_mtime_ns > horizon or st.st_ctime_ns > horizon:
                return None
            entries.append((entry.path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
            if len(entries) > FINGERPRINT_LIMIT:
                return None
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    entries.append((str(directory), *_times(directory)))
    return tuple(sorted(entries))


def _times(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def unbounded() -> float:
    """A step's time when nothing bounds it (one process: no lease another can take over)."""
    return math.inf


def _in_time(time_left: Callable[[], float]) -> None:
    if time_left() <= 0:
        raise OutOfTime("the lease the restore runs under may have run out")


class SnapshotError(RuntimeError):
    """A git command on the shadow repository failed, or was not run: its snapshot is no hash."""


def _hash(snapshot: object) -> str:
    """``snapshot`` as git may be given it: a hash (stored parts may hold anything, even an option)."""
    if isinstance(snapshot, str) and SNAPSHOT.fullmatch(snapshot):
        return snapshot
    raise SnapshotError(f"not a snapshot: {str(snapshot)[:80]!r}")


class ShadowRepository:
    def __init__(self, gitdir: Path, worktree: Path, directory: Path) -> None:
        self.gitdir = gitdir
        self.worktree = worktree
        self.directory = directory
        self._scope = os.path.realpath(directory)  # how the work tree's paths spell it
        self._index_stamp: tuple[int, int, int] | None = None
        self._tree: str | None = None
        self._fingerprint: Fingerprint | None = None

    # -- plumbing -----------------------------------------------------------------------------

    def _git(self, *args: str, stdin: bytes | None = None, at_root: bool = False) -> Result:
        """Run in the session directory (so ``.`` is its subtree), or with ``at_root`` in the
        work tree's root (so paths are root-relative, as every listing prints them)."""
        cwd = self.worktree if at_root else self.directory
        result = git("--git-dir", str(self.gitdir), "--work-tree", str(self.worktree), *args, cwd=str(cwd), stdin=stdin)
        if result.code != 0:
            raise SnapshotError(f"git {args[0]} failed ({result.code}): {result.err.decode(errors='replace').strip()}")
        return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.gitdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.gitdir / "opensession.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            (self.gitdir / "index.lock").unlink(missing_ok=True)
            if not (self.gitdir / "HEAD").exists():
                self._init()
            yield
        finally:
            os.close(fd)  # releases the flock

    def _init(self) -> None:
        git("init", "--quiet", "--bare", str(self.gitdir), cwd=str(self.directory))
        settings = {
            "core.bare": "false",
            "core.autocrlf": "false",
            "core.symlinks": "true",
            "core.fsmonitor": "false",
            "core.untrackedCache": "true",
            "gc.auto": "0",  # no surprise repacking in the middle of a step
        }
        for key, value in settings.items():
            git("--git-dir", str(self.gitdir), "config", key, value, cwd=str(self.directory))
        self._index_stamp = self._tree = None

    def _sync_excludes(self) -> None:
        """The user's ``.git/info/exclude`` applies to the snapshot too (``.gitignore`` files in
        the tree apply by themselves)."""
        source = self.worktree / ".git" / "info" / "exclude"
        target = self.gitdir / "info" / "exclude"
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8", errors="replace") != text:
            target.write_text(text, encoding="utf-8")

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = (self.gitdir / "index").stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _inside(self, path: str) -> str:
        """``path`` (absolute) relative to the work tree's root; RevertFailed unless it names
        something inside the session directory (``..`` resolved first)."""
        normal = os.path.normpath(path) if "\0" not in path else ""
        if not normal.startswith(self._scope + os.sep):
            raise RevertFailed(f"Cannot revert {path!r}: it is outside the session directory {self.directory}")
        return os.path.relpath(normal, self.worktree)

    def _recorded(self, snapshot: str) -> None:
        """RevertFailed unless ``snapshot`` is a tree this repository stored."""
        if SNAPSHOT.fullmatch(snapshot):
            kind = git("--git-dir", str(self.gitdir), "cat-file", "-t", snapshot, cwd=str(self.directory))
            loose = self.gitdir / "objects" / snapshot[:2] / snapshot[2:]
            if kind.code == 0 and kind.text.strip() == "tree" and (snapshot not in EMPTY_TREES or loose.is_file()):
                return
        raise RevertFailed(f"Cannot revert: snapshot {snapshot[:80]!r} is not in this project's snapshot repository")

    # -- operations ---------------------------------------------------------------------------

    def track(self) -> str:
        """Record the subtree now; returns the snapshot (a tree hash)."""
        if (
            self._tree is not None
            and self._fingerprint is not None
            and self._fingerprint == fingerprint(self.directory)
        ):
            return self._tree  # nothing in the subtree moved since the last snapshot
        with self._locked():
            self._sync_excludes()
            self._git("add", "--all", "--", ".")
            self._fingerprint = fingerprint(self.directory)
            stamp = self._stamp()
            if self._tree is None or stamp is None or stamp != self._index_stamp:
                self._tree = (self._git("write-tree")).text.strip()
                self._index_stamp = stamp
            return self._tree

    def patch_text(self, before: str, after: str) -> str:
        with self._locked():
            result = self._git("diff", "--no-ext-diff", "--no-renames", _hash(before), _hash(after), "--", ".")
        return result.text.strip()

    def diff(self, before: str, after: str) -> list[dict[str, Any]]:
        """SnapshotFileDiffs between two snapshots, in path order, from one ``git diff``: its
        NUL-separated raw listing names the files exactly, its patches (whole-file context)
        follow in the same order."""
        if before == after:
            return []
        span = (_hash(before), _hash(after))
        with self._locked():
            out = self._git(
                "diff", "--no-ext-diff", "--no-renames", "--raw", "-z", "-p", WHOLE_FILE, *span, "--", "."
            ).text
        tokens = out.split("\0")
        changes: list[tuple[str, str]] = []
        at = 0
        while at + 1 < len(tokens) and tokens[at].startswith(":"):
            changes.append((tokens[at].split()[-1][:1], tokens[at + 1]))
            at += 2
        bodies = split_patches("\0".join(tokens[at:]).lstrip("\0"))
        bodies += [[]] * (len(changes) - len(bodies))
        return [file_diff(name, code, body) for (code, name), body in zip(changes, bodies, strict=False)]

    def check(self, changes: Mapping[str, str]) -> None:
        """RevertFailed when a path of ``changes`` (absolute path -> the snapshot to take it
        from) lies outside the session directory or a snapshot is not a tree this repository
        recorded."""
        with self._locked():
            self._checked(changes)

    def _checked(self, changes: Mapping[str, str]) -> dict[str, list[str]]:
        """``check``, answering the root-relative names to restore from each snapshot."""
        names: dict[str, list[str]] = {}
        for path, snapshot in changes.items():
            names.setdefault(snapshot, []).append(self._inside(path))
        for snapshot in names:
            self._recorded(snapshot)
        return names

    def restore(self, changes: Mapping[str, str], time_left: Callable[[], float] = unbounded) -> None:
        """Put each file of ``changes`` back to its state in its snapshot, once all of them
        passed ``check`` (a refusal moves nothing). ``time_left`` is asked before each step that
        moves files (one git command or one batch of deletions, up to ``CHUNK`` files): OutOfTime
        when it has run out. The steps already taken stay; whoever finishes the restore puts
        every file back again. A step is not bounded once begun: git runs on even while this
        process is stalled, and ends in moments."""
        with self._locked():
            for snapshot, names in self._checked(changes).items():
                for start in range(0, len(names), CHUNK):
                    chunk = names[start : start + CHUNK]
                    listed = self._git("ls-tree", "--name-only", "-z", snapshot, "--", *chunk, at_root=True)
                    present = set(listed.text.split("\0"))
                    kept = [name for name in chunk if name in present]
                    if kept:
                        _in_time(time_left)
                        self._git("checkout", snapshot, "--", *kept, at_root=True)
                    _in_time(time_left)
                    self._delete([name for name in chunk if name not in present])

    def _delete(self, names: list[str]) -> None:
        """Delete files the snapshot lacks. A name whose folder is reached through a symbolic
        link names no file of the session directory (the link points elsewhere): it is left."""
        for name in names:
            path = os.path.join(self.worktree, name)
            if os.path.realpath(os.path.dirname(path)) != os.path.dirname(path):
                continue
            with suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
                os.unlink(path)
