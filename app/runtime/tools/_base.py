"""What every tool gets and gives back.

A tool receives its parsed arguments and a ``ToolContext`` (the session, its directory, the abort
signal, and hooks to ask permission, report progress and reach session state). It returns a
``ToolResult`` or raises ``ToolError``; both go back to the model, a tool failure never stops the
server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.runtime.abort import AbortSignal
from app.runtime.tools._state import ToolServices
from app.wire import Session

MAX_OUTPUT_CHARS = 30_000


class ToolError(Exception):
    """The call failed in a way the model should hear about (bad arguments, missing file...)."""


@dataclass(slots=True)
class ToolResult:
    output: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    # Files for the part's ``attachments`` ({type: "file", mime, url, filename?}), e.g. MCP images.
    attachments: list[dict[str, Any]] = field(default_factory=list)


Ask = Callable[[str, list[str], list[str], dict[str, Any]], Awaitable[None]]
Progress = Callable[[dict[str, Any]], Awaitable[None]]
# ask_questions(questions): the user's answers, one list of labels per question.
AskQuestions = Callable[[list[dict[str, Any]]], Awaitable[list[list[str]]]]


async def _no_questions(_questions: list[dict[str, Any]]) -> list[list[str]]:
    """Where nobody can answer (a tool run outside a turn), the question tool fails."""
    raise ToolError("Questions cannot be asked here")


@dataclass
class ToolContext:
    session: Session
    message_id: str
    call_id: str
    signal: AbortSignal
    # ask(permission, patterns, always, metadata): returns if allowed, raises Denied/Rejected.
    ask: Ask
    progress: Progress
    services: ToolServices  # the session state a tool may need (todos, files, sub-agents)
    # Raises QuestionRejected (agents domain) when the user dismisses the questions.
    ask_questions: AskQuestions = _no_questions
    # The model that made the call (its reply's providerID/modelID): what it is offered depends on it.
    provider_id: str = ""
    model_id: str = ""

    @property
    def directory(self) -> Path:
        return Path(self.session["directory"])


class Tool(Protocol):
    name: str
    parameters: dict[str, Any]

    @property
    def description(self) -> str: ...  # read when the tools are listed (websearch's names the year)

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult: ...


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n\n... output truncated ({len(text) - limit} more characters)", True


def schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def require(args: dict[str, Any], name: str, kind: type = str) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or (kind is str and not value):
        raise ToolError(f"The {name} parameter is required and must be a {kind.__name__}")
    return value
