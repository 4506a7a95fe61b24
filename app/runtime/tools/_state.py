"""Session state the tools keep (the todo list) and what they announce (files they edited)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.events.log import EventLog
from app.events.model import Event
from app.runtime.abort import AbortSignal
from app.runtime.formatters import Formatters
from app.runtime.lsp import LanguageServers
from app.runtime.tools._settings import ToolSettings
from app.runtime.workspace import Workspace
from app.store import todo_lists
from app.wire import Session

if TYPE_CHECKING:  # _skills needs _base, which needs this module
    from app.runtime.tools._skills import Skills


class Subagents(Protocol):
    """Runs a sub-agent in a child session of ``parent`` and returns the child and its answer."""

    async def run(
        self, parent: Session, description: str, prompt: str, agent: str, signal: AbortSignal
    ) -> tuple[Session, str]: ...


@dataclass
class ToolServices:
    """The tools domain as others see it: the session state tools reach through their context."""

    todos: TodoStore
    files: FileEdits
    tasks: Subagents
    workspace: Workspace = field(default_factory=Workspace)  # the search engine list/glob/grep share
    skills: Skills | None = None  # None: no skills (direct tool tests)
    # Which optional tools are offered and where websearch searches: the environment's switches.
    settings: ToolSettings = field(default_factory=ToolSettings.from_environ)
    # What runs after a write (formatters, then language servers); None: nothing (direct tool tests).
    formatters: Formatters | None = None
    lsp: LanguageServers | None = None

    @classmethod
    def build(
        cls,
        log: EventLog,
        tasks: Subagents,
        workspace: Workspace,
        skills: Skills,
        formatters: Formatters | None = None,
        lsp: LanguageServers | None = None,
    ) -> ToolServices:
        return cls(
            todos=TodoStore(log),
            files=FileEdits(log),
            tasks=tasks,
            workspace=workspace,
            skills=skills,
            formatters=formatters,
            lsp=lsp,
        )


class TodoStore:
    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def get(self, session_id: str) -> list[dict[str, Any]]:
        return await todo_lists.of_session(self.log.db, session_id)

    async def replace(self, session: Session, todos: list[dict[str, Any]]) -> None:
        async with self.log.transaction() as tx:  # checks the drain's lease, as its other writes
            todo_lists.replace(tx.scope, session["id"], todos)
        self.log.publish(
            Event("todo.updated", {"sessionID": session["id"], "todos": todos}, session["id"], session["directory"])
        )


class FileEdits:
    """Announces a file a tool wrote (``file.edited``, as OpenCode's clients expect). What a
    step changed is known from its snapshots, whoever changed it."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def edited(self, session: Session, path: Path) -> None:
        self.log.publish(Event("file.edited", {"file": str(path)}, None, session["directory"]))
