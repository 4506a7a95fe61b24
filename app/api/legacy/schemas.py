"""Request bodies of the legacy API, as OpenCode's OpenAPI document defines them. Unknown fields
are ignored (as OpenCode does); wrong types and missing required fields are 400s."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.deps import MessageID, PartID, SessionID


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ModelChoice(_Body):
    providerID: str = Field(min_length=1)
    modelID: str = Field(min_length=1)


class SessionModel(_Body):
    id: str = Field(min_length=1)
    providerID: str = Field(min_length=1)
    variant: str | None = None


class PermissionRule(_Body):
    permission: str
    pattern: str
    action: Literal["allow", "deny", "ask"]


class SessionCreate(_Body):
    parentID: SessionID | None = None
    title: str | None = None
    agent: str | None = None
    model: SessionModel | None = None
    metadata: dict[str, Any] | None = None
    permission: list[PermissionRule] | None = None
    workspaceID: str | None = None


class SessionTime(_Body):
    archived: float | None = Field(default=None, allow_inf_nan=False)


class SessionUpdate(_Body):
    title: str | None = None
    metadata: dict[str, Any] | None = None
    permission: list[PermissionRule] | None = None
    time: SessionTime | None = None


class _PartInput(_Body):
    id: PartID | None = None


class TextPartInput(_PartInput):
    type: Literal["text"]
    text: str
    synthetic: bool | None = None
    ignored: bool | None = None
    time: dict[str, float] | None = None
    metadata: dict[str, Any] | None = None


class FilePartInput(_PartInput):
    type: Literal["file"]
    mime: str
    url: str
    filename: str | None = None
    source: dict[str, Any] | None = None


class AgentPartInput(_PartInput):
    type: Literal["agent"]
    name: str
    source: dict[str, Any] | None = None


class SubtaskPartInput(_PartInput):
    type: Literal["subtask"]
    prompt: str
    description: str
    agent: str
    model: ModelChoice | None = None
    command: str | None = None


PartInput = Annotated[TextPartInput | FilePartInput | AgentPartInput | SubtaskPartInput, Field(discriminator="type")]


class PromptBody(_Body):
    """``POST /session/:id/message`` and ``/prompt_async``. Both model shapes seen in the wild are
    accepted: ``model: {providerID, modelID}`` and the older top-level ``providerID``/``modelID``."""

    messageID: MessageID | None = None
    model: ModelChoice | None = None
    providerID: str | None = None
    modelID: str | None = None
    agent: str | None = None
    mode: str | None = None  # 0.x's name for the agent (the Stainless SDKs send it)
    noReply: bool | None = None
    system: str | None = None
    variant: str | None = None
    tools: dict[str, bool] | None = None
    format: dict[str, Any] | None = None
    parts: list[PartInput] = Field(min_length=1)

    @model_validator(mode="after")
    def _legacy_model_fields(self) -> PromptBody:
        self.agent = self.agent or self.mode
        if self.model is None and (self.providerID or self.modelID):
            if not (self.providerID and self.modelID):
                raise ValueError("providerID and modelID must be given together")
            self.model = ModelChoice(providerID=self.providerID, modelID=self.modelID)
        return self


class RevertBody(_Body):
    messageID: MessageID
    partID: PartID | None = None


class ForkBody(_Body):
    messageID: MessageID | None = None


class PartBody(BaseModel):
    """A whole part, as ``PATCH .../part/:partID`` takes it; fields beyond the common ones are kept."""

    model_config = ConfigDict(extra="allow")

    id: PartID
    type: str = Field(min_length=1)
    sessionID: SessionID | None = None
    messageID: MessageID | None = None

    @model_validator(mode="after")
    def _known_fields_have_their_types(self) -> PartBody:
        """The fields clients read for each part type must keep their types."""
        extra = self.model_extra or {}
        required = {"text": ("text",), "reasoning": ("text",), "file": ("mime", "url"), "agent": ("name",)}
        for name in required.get(self.type, ()):
            if not isinstance(extra.get(name), str):
                raise ValueError(f"a {self.type} part needs a string {name}")
        return self


class SummarizeBody(_Body):
    providerID: str = Field(min_length=1)
    modelID: str = Field(min_length=1)
    auto: bool | None = None


class ShellBody(_Body):
    agent: str = Field(min_length=1)
    command: str = Field(min_length=1, max_length=100_000)
    model: ModelChoice | None = None
    messageID: MessageID | None = None


class InitBody(_Body):
    modelID: str = Field(min_length=1)
    providerID: str = Field(min_length=1)
    messageID: MessageID


class CommandBody(_Body):
    command: str = Field(min_length=1)
    arguments: str = ""
    agent: str | None = None
    model: str | None = None
    messageID: MessageID | None = None
    variant: str | None = None


class PtyCreate(_Body):
    command: str | None = None
    args: list[str] | None = None
    cwd: str | None = None
    title: str | None = None
    env: dict[str, str] | None = None


class PtySize(_Body):
    rows: int = Field(gt=0, le=0xFFFF)  # the kernel's window size fields are 16-bit
    cols: int = Field(gt=0, le=0xFFFF)


class PtyUpdate(_Body):
    title: str | None = None
    size: PtySize | None = None


class _McpConfig(BaseModel):
    """OpenCode's MCP server configs are strict (``additionalProperties: false``): a misspelt
    key is a 400 naming it rather than a server that silently ignores it."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = None
    timeout: int | None = Field(default=None, gt=0, description="Milliseconds")


class McpLocalConfig(_McpConfig):
    type: Literal["local"]
    command: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    cwd: str | None = None
    environment: dict[str, str] | None = None


class McpRemoteConfig(_McpConfig):
    type: Literal["remote"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] | None = None
    oauth: dict[str, Any] | Literal[False] | None = None


class McpAdd(_Body):
    name: str = Field(min_length=1)
    config: Annotated[McpLocalConfig | McpRemoteConfig, Field(discriminator="type")]


class McpAuthCallback(_Body):
    code: str


class PatchBody(BaseModel):
    """``POST /vcs/apply``: held in memory and handed to git whole (the body limit bounds it)."""

    model_config = ConfigDict(extra="forbid")  # as OpenCode's schema says
    patch: str


class WorktreeCreateInput(_Body):
    name: str | None = None
    startCommand: str | None = Field(
        default=None, description="Additional startup script to run after the project's start command"
    )


class WorktreeInput(_Body):
    """The worktree a reset or removal is about: its absolute directory."""

    directory: str


class WorktreeResetInput(WorktreeInput):
    pass


class WorktreeRemoveInput(WorktreeInput):
    pass
