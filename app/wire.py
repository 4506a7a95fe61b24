"""The OpenCode SDK's wire shapes the server reasons about, as ``TypedDict``s (they cost nothing
at run time: the values stay the plain dicts the store, the events and the routes pass on).

They mirror the SDK's types (OpenCode's OpenAPI document: ``Session``, ``GlobalSession``,
``UserMessage``, ``AssistantMessage``, the ``Part`` kinds, ``ToolState``, ``SessionStatus``),
with the keys OpenCode requires as required keys. A key the server adds or reads beyond the SDK's
stays reachable only through the dict it is part of, never by widening these types.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias

from typing_extensions import TypedDict

# -- sessions -------------------------------------------------------------------------------------


class SessionTime(TypedDict):
    created: int
    updated: int
    compacting: NotRequired[int]
    archived: NotRequired[float]


class Session(TypedDict):
    id: str
    slug: str
    projectID: str
    directory: str
    title: str
    version: str
    time: SessionTime
    workspaceID: NotRequired[str]
    path: NotRequired[str]
    parentID: NotRequired[str]
    summary: NotRequired[dict[str, Any]]
    cost: NotRequired[float]
    tokens: NotRequired[dict[str, Any]]
    share: NotRequired[dict[str, str]]
    agent: NotRequired[str]
    model: NotRequired[dict[str, str]]
    metadata: NotRequired[dict[str, Any]]
    permission: NotRequired[list[dict[str, Any]]]
    revert: NotRequired[dict[str, Any]]


class ProjectSummary(TypedDict):
    id: str
    worktree: str
    name: NotRequired[str]


class GlobalSession(Session):
    """A session listed across projects (``GET /experimental/session``), with its project."""

    project: ProjectSummary | None


class IdleStatus(TypedDict):
    type: Literal["idle"]


class BusyStatus(TypedDict):
    type: Literal["busy"]


class RetryStatus(TypedDict):
    type: Literal["retry"]
    attempt: int
    message: str
    next: int  # epoch milliseconds of the next attempt
    action: NotRequired[dict[str, str]]


SessionStatus: TypeAlias = IdleStatus | BusyStatus | RetryStatus

# -- messages -------------------------------------------------------------------------------------


class UserMessage(TypedDict):
    id: str
    sessionID: str
    role: Literal["user"]
    time: dict[str, int]  # created
    agent: str
    model: dict[str, str]  # providerID, modelID (and variant)
    format: NotRequired[dict[str, Any]]
    summary: NotRequired[dict[str, Any]]
    system: NotRequired[str]
    tools: NotRequired[dict[str, bool]]


class AssistantMessage(TypedDict):
    id: str
    sessionID: str
    role: Literal["assistant"]
    time: dict[str, int]  # created, and completed once the reply ended
    parentID: str
    modelID: str
    providerID: str
    mode: str
    agent: str
    path: dict[str, str]  # cwd, root
    cost: float
    tokens: dict[str, Any]
    error: NotRequired[dict[str, Any]]
    summary: NotRequired[bool]
    structured: NotRequired[Any]
    variant: NotRequired[str]
    finish: NotRequired[str]


Message: TypeAlias = UserMessage | AssistantMessage

# -- parts ----------------------------------------------------------------------------------------


class _PartBase(TypedDict):
    id: str
    sessionID: str
    messageID: str


class TextPart(_PartBase):
    type: Literal["text"]
    text: str
    synthetic: NotRequired[bool]
    ignored: NotRequired[bool]
    time: NotRequired[dict[str, int]]
    metadata: NotRequired[dict[str, Any]]


class ReasoningPart(_PartBase):
    type: Literal["reasoning"]
    text: str
    time: dict[str, int]
    metadata: NotRequired[dict[str, Any]]


class FilePart(_PartBase):
    type: Literal["file"]
    mime: str
    url: str
    filename: NotRequired[str]
    source: NotRequired[dict[str, Any]]


class ToolStatePending(TypedDict):
    status: Literal["pending"]
    input: dict[str, Any]
    raw: str


class ToolStateRunning(TypedDict):
    status: Literal["running"]
    input: dict[str, Any]
    time: dict[str, int]
    title: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]


class ToolStateCompleted(TypedDict):
    status: Literal["completed"]
    input: dict[str, Any]
    output: str
    title: str
    metadata: dict[str, Any]
    time: dict[str, int]  # start, end (and compacted)
    attachments: NotRequired[list[FilePart]]


class ToolStateError(TypedDict):
    status: Literal["error"]
    input: dict[str, Any]
    error: str
    time: dict[str, int]
    metadata: NotRequired[dict[str, Any]]


ToolState: TypeAlias = ToolStatePending | ToolStateRunning | ToolStateCompleted | ToolStateError


class ToolPart(_PartBase):
    type: Literal["tool"]
    callID: str
    tool: str
    state: ToolState
    metadata: NotRequired[dict[str, Any]]


class StepStartPart(_PartBase):
    type: Literal["step-start"]
    snapshot: NotRequired[str]


class StepFinishPart(_PartBase):
    type: Literal["step-finish"]
    reason: str
    cost: float
    tokens: dict[str, Any]
    snapshot: NotRequired[str]


class SubtaskPart(_PartBase):
    type: Literal["subtask"]
    prompt: str
    description: str
    agent: str
    model: NotRequired[dict[str, str]]
    command: NotRequired[str]


class SnapshotPart(_PartBase):
    type: Literal["snapshot"]
    snapshot: str


class PatchPart(_PartBase):
    type: Literal["patch"]
    hash: str
    files: list[str]


class AgentPart(_PartBase):
    type: Literal["agent"]
    name: str
    source: NotRequired[dict[str, Any]]


class RetryPart(_PartBase):
    type: Literal["retry"]
    attempt: int
    error: dict[str, Any]
    time: dict[str, int]


class CompactionPart(_PartBase):
    type: Literal["compaction"]
    auto: bool
    overflow: NotRequired[bool]
    tail_start_id: NotRequired[str]


Part: TypeAlias = (
    TextPart
    | SubtaskPart
    | ReasoningPart
    | FilePart
    | ToolPart
    | StepStartPart
    | StepFinishPart
    | SnapshotPart
    | PatchPart
    | AgentPart
    | RetryPart
    | CompactionPart
)


class MessageWithParts(TypedDict):
    """A message as the message routes list it: its info and its parts."""

    info: Message
    parts: list[Part]


# -- worktrees ------------------------------------------------------------------------------------


class Worktree(TypedDict):
    """``POST /experimental/worktree``'s answer."""

    name: str
    branch: str
    directory: str
