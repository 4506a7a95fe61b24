"""Session state the tools keep: the todo list and the files they changed (for the session
diff)."""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.events.log import EventLog
from app.events.model import Event
from app.jsonutil import dumps, loads
from app.runtime.abort import AbortSignal
from app.runtime.workspace import Workspace
from app.store import sql


class Subagents(Protocol):
    """Runs a sub-agent in a child session of ``parent`` and returns the child and its answer."""

    async def run(
        self, parent: dict[str, Any], description: str, prompt: str, agent: str, signal: AbortSignal
    ) -> tuple[dict[str, Any], str]: ...


@dataclass
class ToolServices:
    """The tools domain as others see it: the session state tools reach through their context."""

    todos: TodoStore
    files: FileChanges
    tasks: Subagents
    workspace: Workspace = field(default_factory=Workspace)  # the search engine list/glob/grep share

    @classmethod
    def build(cls, log: EventLog, tasks: Subagents, workspace: Workspace) -> ToolServices:
        return cls(todos=TodoStore(log), files=FileChanges(log), tasks=tasks, workspace=workspace)


class TodoStore:
    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def get(self, session_id: str) -> list[dict[str, Any]]:
        row = await self.log.db.fetch_one(sql.TODOS, {"session_id": session_id})
        return loads(row[0]) if row else []

    async def replace(self, session: dict[str, Any], todos: list[dict[str, Any]]) -> None:
        async with self.log.db.write() as scope:
            scope.execute(sql.UPSERT_TODOS, {"session_id": session["id"], "todos": dumps(todos)})
        self.log.publish(
            Event("todo.updated", {"sessionID": session["id"], "todos": todos}, session["id"], session["directory"])
        )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return None


def file_diff(name: str, before: str | None, after: str | None) -> dict[str, Any] | None:
    """OpenCode's SnapshotFileDiff for one file, or None when it is unchanged."""
    if before == after:
        return None
    lines = list(
        difflib.unified_diff(
            (before or "").splitlines(keepends=True),
            (after or "").splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )
    additions = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    deletions = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    status = "added" if before is None else "deleted" if after is None else "modified"
    return {"file": name, "patch": "".join(lines), "additions": additions, "deletions": deletions, "status": status}


class FileChanges:
    """Remembers each file's content before a session's tools first changed it."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def remember(self, session_id: str, path: Path) -> None:
        content = await asyncio.to_thread(_read, path)
        async with self.log.db.write() as scope:
            scope.execute(sql.INSERT_BASELINE, {"session_id": session_id, "path": str(path), "content": content})

    async def diff(self, session: dict[str, Any]) -> list[dict[str, Any]]:
        rows = await self.log.db.fetch(sql.BASELINES, {"session_id": session["id"]})
        root = Path(session["directory"]).resolve()

        def compute() -> list[dict[str, Any]]:
            diffs = []
            for path, before in rows:
                name = str(Path(path).relative_to(root)) if Path(path).is_relative_to(root) else path
                change = file_diff(name, before, _read(Path(path)))
                if change is not None:
                    diffs.append(change)
            return diffs

        return await asyncio.to_thread(compute)
