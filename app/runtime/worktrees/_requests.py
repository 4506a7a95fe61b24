"""Which request made a worktree: a create sent again with its Idempotency-Key (nginx passing
the POST to another replica after the first died mid-request, or a client's retry) answers the
worktree the first made instead of adding a second under a suffixed name.

The mark is a note in the worktree's own git directory (``write_note``), so every process that
shares the project finds it. The mark is journaled with the add (``_adds``) before git makes the
worktree: a retry after its maker died between the two finishes the add first, mark included."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from app.runtime.errors import RequestKeyConflict
from app.runtime.worktrees._git import read_note, write_note
from app.wire import Worktree

REQUEST_MARK = "opensession-request.json"


@dataclass(frozen=True, slots=True)
class RequestMark:
    """The request that made a worktree: its Idempotency-Key, what it asked and what it answered."""

    key: str
    request: str
    made: Worktree


def mark(request: RequestMark) -> None:
    """Record ``request`` with the worktree it made (blocking: run on a thread)."""
    write_note(request.made["directory"], REQUEST_MARK, asdict(request))


def made_for(home: Path, key: str, asked: str) -> Worktree | None:
    """The worktree in ``home`` (a project's worktree directory, where every create puts its
    worktree) that a request keyed ``key`` made (a request asking for something else under that
    key is a conflict); None if there is none. Read from the trees' notes, not from
    ``git worktree list``, which a half-made worktree elsewhere in the repository can break.
    Blocking."""
    for tree in sorted(home.glob("*")):
        found = read_note(str(tree), REQUEST_MARK)
        if found and found["key"] == key:
            if found["request"] != asked:
                raise RequestKeyConflict(key, "another request")
            return RequestMark(**found).made
    return None
