"""What OpenCode calls the project of a directory: the id of the git repository's root commit,
or ``global`` outside a repository. Resolved once per directory (it never changes).

A project's worktree is the directory it was first seen in (the server's own, or a session's):
opensession keeps no project records of its own, so ``projects`` derives them from where the
sessions are."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterable
from typing import Any

from app.processes import tied

_cache: dict[str, str] = {}


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


async def project_id(directory: str) -> str:
    cached = _cache.get(directory)
    if cached is None:
        cached = _cache[directory] = await asyncio.to_thread(_root_commit, directory)
    return cached


def cached_project_id(directory: str) -> str | None:
    """The project id if already resolved (never blocks; used when encoding event frames)."""
    return _cache.get(directory)


async def project_info(directory: str, updated: int | None = None) -> dict[str, Any]:
    """OpenCode's ``Project`` of ``directory``: created when the directory was (its ctime),
    updated at ``updated`` (the latest session activity) when later."""
    pid = await project_id(directory)
    try:
        created = int(os.stat(directory).st_ctime * 1000)
    except OSError:
        created = 0
    return {
        "id": pid,
        "worktree": directory,
        "vcs": "git" if pid != "global" else None,
        "time": {"created": created, "updated": max(created, updated or 0)},
        "sandboxes": [],
    }


async def projects(current: str, directories: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """One project per id: ``current``'s first, then those of ``directories`` (each with its
    latest activity, most recent first), each as the first of its directories seen."""
    found: dict[str, dict[str, Any]] = {}
    for directory, updated in [(current, 0), *directories]:
        pid = await project_id(directory)
        if pid not in found:
            found[pid] = await project_info(directory, updated)
        else:
            found[pid]["time"]["updated"] = max(found[pid]["time"]["updated"], updated)
    return list(found.values())
