"""What OpenCode calls the project of a directory: the id of the git repository's root commit,
or ``global`` outside a repository. Resolved once per directory (it never changes).

A project's worktree is the directory it was first seen in (the server's own, or a session's):
``projects`` derives them from where the sessions are. What clients set on a project (``name``,
``icon``, ``commands``: ``PATCH /project/:id``) is kept by id and laid over that (``with_settings``).

``vcs`` is ``git`` inside a git work tree, even one without a commit yet (whose id is ``global``):
what OpenCode answers after ``POST /project/git/init``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

from app.processes import tied
from app.runtime.errors import InvalidInput
from app.store.project_places import Place

_cache: dict[str, str] = {}
_mains: dict[str, str | None] = {}


def _root_commit(directory: str) -> str:
    try:
        out = subprocess.run(
            tied(["git", "rev-list", "--max-parents=0", "HEAD"]),
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError):  # missing dir, NUL byte, no git...
        return "global"
    roots = sorted(out.stdout.split()) if out.returncode == 0 else []
    return roots[0] if roots else "global"


def _linked_main(directory: str) -> str | None:
    """The main work tree when ``directory`` is in a linked worktree of a repository (``git
    worktree add``), else None: OpenCode shows the main tree as such a project's worktree."""
    try:
        out = subprocess.run(
            tied(["git", "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir"]),
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    found = out.stdout.split("\n") if out.returncode == 0 else []
    if len(found) < 2 or found[0] == found[1] or os.path.basename(found[1]) != ".git":
        return None
    return os.path.dirname(found[1])


async def main_worktree(directory: str) -> str:
    """The project's worktree as shown for ``directory``: its main tree if it is a linked
    worktree, else ``directory`` itself."""
    if directory not in _mains:
        _mains[directory] = await asyncio.to_thread(_linked_main, directory)
    return _mains[directory] or directory


async def project_id(directory: str) -> str:
    cached = _cache.get(directory)
    if cached is None:
        cached = _cache[directory] = await asyncio.to_thread(_root_commit, directory)
    return cached


def _git_init(directory: str) -> str | None:
    """Run ``git init``; what went wrong, or None."""
    if shutil.which("git") is None:
        return "Git is not installed"
    try:
        out = subprocess.run(
            tied(["git", "init", "--quiet"]), cwd=directory, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:  # no such directory, a NUL...
        return f"Cannot initialize a git repository in {directory!r}: {exc}"
    if out.returncode != 0:
        return out.stderr.strip() or out.stdout.strip() or "Failed to initialize git repository"
    return None


async def init_repository(directory: str) -> None:
    """``git init`` in ``directory`` (``InvalidInput`` naming what went wrong)."""
    problem = await asyncio.to_thread(_git_init, directory)
    if problem is not None:
        raise InvalidInput(problem)


def forget(directory: str) -> None:
    """Resolve ``directory``'s project again next time (its repository was just created)."""
    _cache.pop(directory, None)
    _mains.pop(directory, None)


def in_git_work_tree(directory: str) -> bool:
    """Whether ``directory`` or one of its parents holds a ``.git`` (a repository or a worktree's
    link to one), as OpenCode looks for it."""
    path = os.path.abspath(directory)
    while True:
        if os.path.lexists(os.path.join(path, ".git")):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def with_settings(info: dict[str, Any], settings: dict[str, Any], updated: int) -> dict[str, Any]:
    """A project's ``info`` with what clients set on it (``name``, ``icon``, ``commands``) and
    its worktrees (``sandboxes``)."""
    for key in ("name", "icon", "commands", "sandboxes"):
        if key in settings:
            info[key] = settings[key]
    info["time"]["updated"] = max(info["time"]["updated"], updated)
    return info


def cached_project_id(directory: str) -> str | None:
    """The project id if already resolved (never blocks; used when encoding event frames)."""
    return _cache.get(directory)


async def resolved(directory: str) -> Place:
    """``directory``'s project as this machine sees it (``global`` where it lacks the directory)."""
    pid = await project_id(directory)
    try:
        created = int(os.stat(directory).st_ctime * 1000)
    except OSError:
        created = 0
    worktree = await main_worktree(directory) if pid != "global" else directory
    return Place(pid, worktree, "git" if pid != "global" or in_git_work_tree(directory) else None, created)


def learn(directory: str, place: Place) -> None:
    """Take ``place``, recorded by a process whose machine has ``directory``, as its project
    here, where the directory is missing: event frames and the routes then name that project."""
    _cache[directory] = place.project_id
    _mains[directory] = place.worktree if place.worktree != directory else None


def project_of(place: Place, updated: int | None = None) -> dict[str, Any]:
    """OpenCode's ``Project`` of a place: created when the directory was (its ctime), updated at
    ``updated`` (the latest session activity) when later."""
    return {
        "id": place.project_id,
        "worktree": place.worktree,
        "vcs": place.vcs,
        "time": {"created": place.created, "updated": max(place.created, updated or 0)},
        "sandboxes": [],
    }


async def project_info(directory: str, updated: int | None = None) -> dict[str, Any]:
    """OpenCode's ``Project`` of ``directory`` as this machine sees it (``project_of``)."""
    return project_of(await resolved(directory), updated)


def projects(places: Iterable[tuple[Place, int]]) -> list[dict[str, Any]]:
    """One project per id, in the order of ``places`` (each with its latest activity), each as
    its first place, updated at the latest activity of any."""
    found: dict[str, dict[str, Any]] = {}
    for place, updated in places:
        if place.project_id not in found:
            found[place.project_id] = project_of(place, updated)
        else:
            known = found[place.project_id]["time"]
            known["updated"] = max(known["updated"], updated)
    return list(found.values())
