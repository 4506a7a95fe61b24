"""The git commands worktrees need, through the workspace's bounded runner (``LC_ALL=C``, tied to
the server): the worktrees a repository lists, the default branch to reset to, and failures as
the text git wrote (what OpenCode shows a client)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.jsonutil import dumps, loads
from app.runtime.workspace import run_git

QUICK_S = 60.0
SLOW_S = 600.0  # filling or resetting a large tree


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of ``git worktree list --porcelain``: its path and branch (``refs/heads/...``)."""

    path: str
    branch: str | None

    @property
    def real(self) -> str:
        return os.path.realpath(self.path)


def _own_git_dir(tree: str) -> Path | None:
    """A linked worktree's own git directory, as its ``.git`` file names it."""
    try:
        pointer = (Path(tree) / ".git").read_text()
    except OSError:
        return None
    return Path(tree, pointer.removeprefix("gitdir:").strip()) if pointer.startswith("gitdir:") else None


# Notes the server keeps about a worktree it made (``write_note``) live in the worktree's own git
# directory (``.git/worktrees/<name>/`` of the main repository): wherever the repository is, so
# every process sharing the project sees them, and git removes them with the worktree. Blocking
# file work: run on a thread.


def note_path(tree: str, name: str) -> Path | None:
    """Where the note ``name`` of ``tree`` lives; None when ``tree`` is no linked worktree."""
    git_dir = _own_git_dir(tree)
    return None if git_dir is None else git_dir / name


def write_note(tree: str, name: str, value: Any) -> None:
    if (path := note_path(tree, name)) is not None:
        path.write_text(dumps(value))


def read_note(tree: str, name: str) -> Any:
    """The note's value; None when there is none (or it cannot be read)."""
    path = note_path(tree, name)
    try:
        return loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def drop_note(tree: str, name: str) -> None:
    if (path := note_path(tree, name)) is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@dataclass(frozen=True, slots=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def problem(self, fallback: str) -> str:
        """What git said went wrong (standard error as written, else its output), or ``fallback``."""
        return self.err or self.out.strip() or fallback


async def git(root: Path | str, *args: str, timeout: float = QUICK_S) -> Ran:
    code, out, err = await run_git(Path(root), *args, timeout=timeout)
    return Ran(code, out.decode(errors="replace"), err.decode(errors="replace"))


async def worktrees(directory: str) -> list[Listed] | None:
    """The repository's worktrees, the main one first; None outside a git repository."""
    ran = await git(directory, "worktree", "list", "--porcelain", "-z")
    if not ran.ok:
        return None
    found: list[Listed] = []
    path: str | None = None
    branch: str | None = None
    for field in [*ran.out.split("\0"), ""]:
        if field.startswith("worktree "):
            path, branch = field.removeprefix("worktree "), None
        elif field.startswith("branch "):
            branch = field.removeprefix("branch ")
        elif not field and path is not None:
            found.append(Listed(path, branch))
            path = None
    return found


async def common_dir(main: str) -> Path | None:
    """The repository's git directory (``.git`` of the main tree, usually): what every worktree
    shares, its administrative directories under ``worktrees/``."""
    ran = await git(main, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(ran.out.strip()) if ran.ok else None


REPOSITORY_LOCK = "opensession-worktrees.lock"
LOCK_POLL_S = 0.01


@contextlib.asynccontextmanager
async def repository_lock(common: Path) -> AsyncIterator[None]:
    """Held around every change this server makes to the repository's worktrees (adding,
    removing, undoing an add cut short), by every process sharing the repository: git writes a
    new worktree's administrative directory file by file, and another ``git worktree`` command
    that reads it meanwhile (an empty ``commondir``) fails. An exclusive ``flock`` in the
    repository's git directory, polled so that a cancelled wait takes nothing. Where that
    directory is not writable, nothing is locked: git then says what it cannot do."""
    try:
        descriptor = os.open(common / REPOSITORY_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(descriptor)


async def has_branch(main: str, branch: str) -> bool:
    return (await git(main, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")).ok


async def _remote(main: str) -> str | None:
    """``origin``, else the only remote, else ``upstream``: whose HEAD names the default branch."""
    remotes = (await git(main, "remote")).out.split()
    if "origin" in remotes:
        return "origin"
    if len(remotes) == 1:
        return remotes[0]
    return "upstream" if "upstream" in remotes else None


async def default_target(main: str) -> tuple[str, str | None, str | None] | None:
    """What a reset moves a worktree to: ``(ref, remote, branch)``, the remote and its branch
    when the ref is a remote's HEAD (fetched first); else a local default branch
    (``init.defaultBranch``, ``main``, ``master``); None without one."""
    remote = await _remote(main)
    if remote is not None:
        head = await git(main, "symbolic-ref", f"refs/remotes/{remote}/HEAD")
        target = head.out.strip().removeprefix("refs/remotes/")
        if head.ok and target.startswith(f"{remote}/"):
            return target, remote, target.removeprefix(f"{remote}/")
    configured = (await git(main, "config", "--get", "init.defaultBranch")).out.strip()
    for name in dict.fromkeys(n for n in (configured, "main", "master") if n):
        if await has_branch(main, name):
            return name, None, None
    return None
