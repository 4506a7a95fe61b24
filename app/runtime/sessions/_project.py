"""What OpenCode calls the project of a directory: the id of the git repository's root commit,
or ``global`` outside a repository. Resolved once per directory (it never changes)."""

from __future__ import annotations

import asyncio
import subprocess

_cache: dict[str, str] = {}


def _root_commit(directory: str) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-list", "--max-parents=0", "HEAD"],
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
