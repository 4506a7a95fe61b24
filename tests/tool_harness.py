"""The harness tool tests run a tool through: a real temporary project, real tool services on a
real database, and a permission callback that records what was asked (and refuses on demand:
a whole permission, or the patterns permission rules deny)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.runtime.abort import AbortSignal
from app.runtime.agents import Denied, Permissions, Rule
from app.runtime.tools import TOOLS, ToolContext, ToolServices
from tests.helpers import session_info


class Harness:
    def __init__(self, root: Path, services: ToolServices) -> None:
        self.root = root
        self.services = services
        self.asked: list[tuple[str, list[str]]] = []
        self.refuse: set[str] = set()
        self.rules: list[Rule] = []  # evaluated as a session's rules are, last match wins
        self.progress: list[dict[str, Any]] = []
        self.signal = AbortSignal()

    def context(self) -> ToolContext:
        async def ask(permission: str, patterns: list[str], always: list[str], metadata: dict[str, Any]) -> None:
            self.asked.append((permission, patterns))
            if permission in self.refuse or Permissions.denied(self.rules, permission, patterns):
                raise Denied

        async def progress(metadata: dict[str, Any]) -> None:
            self.progress.append(metadata)

        session = session_info(str(self.root))
        return ToolContext(session, "msg_test", "call_test", self.signal, ask, progress, self.services)

    async def run(self, name: str, **args: Any) -> Any:
        return await TOOLS[name].run(self.context(), args)
