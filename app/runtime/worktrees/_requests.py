"""Which request made a worktree: a create sent again with its Idempotency-Key (nginx passing
the POST to another replica after the first died mid-request, or a client's retry) answers the
worktree the first made instead of adding a second under a suffixed name.

The mark is a file in the worktree's own git directory (``.git/worktrees/<name>/`` of the main
repository): it lives wherever the repository does, so every process that shares the project
finds it, and git removes it with the worktree. A process that dies between ``git worktree add``
and writing the mark leaves a worktree its retry does not recognise."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.jsonutil import dumps, loads
from app.runtime.errors import RequestKeyConflict
from app.runtime.worktrees._git import own_git_dir, worktrees
from app.wire import Worktree

REQUEST_MARK = "opensession-request.json"


@dataclass(frozen=True, slots=True)
class RequestMark:
    """The request that made a worktree: its Idempotency-Key, what it asked and what it answered."""

    key: str
    request: str
    made: Worktree


def mark(tree: str, request: RequestMark) -> None:
    """Record ``request`` with the worktree ``tree`` it made (blocking: run on a thread)."""
    git_dir = own_git_dir(tree)
    if git_dir is not None:
        (git_dir / REQUEST_MARK).write_text(
            dumps({"key": request.key, "request": request.request, "made": request.made})
        )


def _read_mark(tree: str) -> RequestMark | None:
    git_dir = own_git_dir(tree)
    try:
        found = loads((git_dir / REQUEST_MARK).read_text()) if git_dir is not None else None
    except (OSError, ValueError):
        return None
    return RequestMark(found["key"], found["request"], found["made"]) if found else None


async def made_for(main: str, key: str, asked: str) -> Worktree | None:
    """The worktree of ``main``'s repository that a request keyed ``key`` made (a request asking
    for something else under that key is a conflict); None if there is none."""
    for entry in (await worktrees(main) or [])[1:]:
        found = await asyncio.to_thread(_read_mark, entry.path)
        if found is not None and found.key == key:
            if found.request != asked:
                raise RequestKeyConflict(key, "another request")
            return found.made
    return None
