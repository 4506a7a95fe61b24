"""Request-scoped dependencies shared by the routers: the services of the runtime each route
uses, the instance directory a request is scoped to, and validated path identifiers.

A route names the services it calls (``sessions: SessionsDep``), typed, rather than reaching
through the whole runtime (``runtime.sessions.get``); ``RuntimeDep`` remains for the operations
the runtime itself offers (``statuses``, ``switch``, ...), which span domains. A service dependency
only reads the runtime, so naming two costs a route two cheap calls and nothing else."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote

from fastapi import Depends, Path, Query
from pydantic import Field
from starlette.requests import HTTPConnection

from app.api.sse import EventSources
from app.config import ConfigLoader
from app.events.log import EventLog
from app.providers.credentials import Credentials
from app.providers.registry import ProviderRegistry
from app.runtime.agents import Agents, Permissions, Questions
from app.runtime.errors import InvalidInput
from app.runtime.extensions import Extensions
from app.runtime.formatters import Formatters
from app.runtime.history import History, Importer, Reverts, SessionDiffs, Shares
from app.runtime.integrations import Integrations
from app.runtime.lsp import LanguageServers
from app.runtime.prompting import Prompting
from app.runtime.service import Runtime
from app.runtime.sessions import SessionService
from app.runtime.terminals import Terminals
from app.runtime.tools import Skills, TodoStore, ToolSettings
from app.runtime.turn import Commands
from app.runtime.workspace import Workspace
from app.runtime.worktrees import Worktrees
from app.settings import Settings

ID_PATTERN = r"^{prefix}_[0-9A-Za-z]{{1,64}}$"
MAX_INT = 2**63 - 1  # what a SQLite integer holds: query numbers beyond it are refused, not overflowed


def _id(prefix: str) -> object:
    return Field(pattern=ID_PATTERN.format(prefix=prefix))


# Identifier types for request bodies; the prefix is what OpenCode clients rely on.
SessionID = Annotated[str, _id("ses")]
MessageID = Annotated[str, _id("msg")]
PartID = Annotated[str, _id("prt")]
WorkspaceID = Annotated[str, _id("wrk")]

SessionIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="ses"), description="Session ID (ses_...)")]
PartIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="prt"), description="Part ID (prt_...)")]
MessageIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="msg"), description="Message ID (msg_...)")]
PtyIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="pty"), description="PTY ID (pty_...)")]


T = TypeVar("T")


async def get_runtime(request: HTTPConnection) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _service(pick: Callable[[Runtime], T]) -> Any:
    """The dependency handing a route what ``pick`` reads off the runtime."""

    async def service(request: HTTPConnection) -> T:
        return pick(request.app.state.runtime)

    return Depends(service)


async def instance_directory(
    request: HTTPConnection,
    directory: Annotated[str | None, Query(description="Project directory the request is scoped to")] = None,
) -> str:
    """``?directory=`` wins, then the ``x-opencode-directory`` header (URI-encoded by the SDK), then
    the server's own directory."""
    value = directory or request.headers.get("x-opencode-directory")
    if not value:
        default: str = request.app.state.runtime.settings.directory
        return default
    return checked_directory(unquote(value), kind="Query")


async def location_directory(
    request: HTTPConnection,
    location: Annotated[
        str | None, Query(alias="location[directory]", description="Project directory (V2 location)")
    ] = None,
    directory: Annotated[str | None, Query(description="Project directory the request is scoped to")] = None,
) -> str:
    """V2 reads name their instance as ``?location[directory]=`` (a deep object); otherwise as the
    legacy routes do."""
    if location:
        return checked_directory(unquote(location), kind="Query")
    return await instance_directory(request, directory)


IDEMPOTENCY_KEY_MAX = 255


async def idempotency_key(request: HTTPConnection) -> str | None:
    """The request's ``Idempotency-Key`` header: a prompt sent again with the same key is the one
    already admitted (the shipped nginx configuration sends one with every request, the same on
    the retry it makes when a replica died with the request). Read from the connection rather
    than declared, so the OpenAPI document stays OpenCode's."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 0 < len(key) <= IDEMPOTENCY_KEY_MAX:
        raise InvalidInput(f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} characters", kind="Header")
    return key


def checked_directory(value: str, *, kind: str = "Payload") -> str:
    """An absolute, NUL-free directory path, normalised."""
    if "\0" in value or not os.path.isabs(value):
        raise InvalidInput(f"directory must be an absolute path, got {value!r}", kind=kind)
    return os.path.normpath(value)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
DirectoryDep = Annotated[str, Depends(instance_directory)]
LocationDep = Annotated[str, Depends(location_directory)]
IdempotencyKeyDep = Annotated[str | None, Depends(idempotency_key)]

SettingsDep = Annotated[Settings, _service(lambda runtime: runtime.settings)]
ConfigDep = Annotated[ConfigLoader, _service(lambda runtime: runtime.config)]


def _current(refresh: Callable[[Runtime], Awaitable[None]], pick: Callable[[Runtime], T]) -> Any:
    """``_service`` for the routes that show what every process of a cluster shares and follows
    (saved credentials, run-time MCP changes): ``refresh`` brings this process's copy up to date
    first, so a change just made through another process shows (one read on a shared database;
    nothing with one process)."""

    async def service(request: HTTPConnection) -> T:
        runtime: Runtime = request.app.state.runtime
        await refresh(runtime)
        return pick(runtime)

    return Depends(service)


def _credentials(runtime: Runtime) -> Awaitable[None]:
    return runtime.registry.credentials.refresh()


ProvidersDep = Annotated[ProviderRegistry, _current(_credentials, lambda runtime: runtime.registry)]
CredentialsDep = Annotated[Credentials, _current(_credentials, lambda runtime: runtime.registry.credentials)]
EventLogDep = Annotated[EventLog, _service(lambda runtime: runtime.log)]
EventSourcesDep = Annotated[
    EventSources,
    _service(
        lambda runtime: EventSources(
            runtime.feeds, runtime.bus, runtime.log.topology.committed_now, runtime.settings.stream_send_timeout
        )
    ),
]
SessionsDep = Annotated[SessionService, _service(lambda runtime: runtime.sessions)]
PromptingDep = Annotated[Prompting, _service(lambda runtime: runtime.prompting)]
HistoryDep = Annotated[History, _service(lambda runtime: runtime.history)]
DiffsDep = Annotated[SessionDiffs, _service(lambda runtime: runtime.diffs)]
RevertsDep = Annotated[Reverts, _service(lambda runtime: runtime.reverts)]
SharesDep = Annotated[Shares, _service(lambda runtime: runtime.shares)]
ImportsDep = Annotated[Importer, _service(lambda runtime: runtime.imports)]
AgentsDep = Annotated[Agents, _service(lambda runtime: runtime.agents)]
PermissionsDep = Annotated[Permissions, _service(lambda runtime: runtime.permissions)]
QuestionsDep = Annotated[Questions, _service(lambda runtime: runtime.questions)]
CommandsDep = Annotated[Commands, _service(lambda runtime: runtime.commands)]
SkillsDep = Annotated[Skills, _service(lambda runtime: runtime.skills)]
TodosDep = Annotated[TodoStore, _service(lambda runtime: runtime.tool_state.todos)]
ToolSettingsDep = Annotated[ToolSettings, _service(lambda runtime: runtime.tool_state.settings)]


ExtensionsDep = Annotated[
    Extensions, _current(lambda runtime: runtime.extensions.refresh(), lambda runtime: runtime.extensions)
]
IntegrationsDep = Annotated[Integrations, _current(_credentials, lambda runtime: runtime.integrations)]
TerminalsDep = Annotated[Terminals, _service(lambda runtime: runtime.terminals)]
WorkspaceDep = Annotated[Workspace, _service(lambda runtime: runtime.workspace)]
WorktreesDep = Annotated[Worktrees, _service(lambda runtime: runtime.worktrees)]
LanguageServersDep = Annotated[LanguageServers, _service(lambda runtime: runtime.lsp)]
FormattersDep = Annotated[Formatters, _service(lambda runtime: runtime.formatters)]
