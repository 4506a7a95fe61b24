"""Request bodies of the V2 API (``/api/...``), as OpenCode 1.18's OpenAPI document defines them:
unknown fields are refused (``additionalProperties: false``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import MessageID, SessionID, WorkspaceID
from app.api.legacy import schemas as legacy


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRefBody(_Body):
    id: str = Field(min_length=1)
    providerID: str = Field(min_length=1)
    variant: str | None = None


class LocationBody(_Body):
    directory: str = Field(min_length=1)
    workspaceID: WorkspaceID | None = None


class SessionCreate(_Body):
    id: SessionID | None = None
    agent: str | None = Field(default=None, min_length=1)
    model: ModelRefBody | None = None
    location: LocationBody | None = None


class PromptFile(_Body):
    uri: str = Field(min_length=1)
    mime: str | None = Field(default=None, min_length=1)  # optional on input; guessed from the uri
    name: str | None = None
    description: str | None = None
    source: dict[str, Any] | None = None


class PromptAgent(_Body):
    name: str = Field(min_length=1)
    source: dict[str, Any] | None = None


class PromptContent(_Body):
    text: str
    files: list[PromptFile] | None = None
    agents: list[PromptAgent] | None = None


class PromptBody(_Body):
    id: MessageID | None = None
    prompt: PromptContent
    delivery: Literal["steer", "queue"] = "steer"
    resume: bool = True


class AgentBody(_Body):
    agent: str = Field(min_length=1)


class ModelBody(_Body):
    model: ModelRefBody


class RevertStageBody(_Body):
    messageID: MessageID
    files: bool | None = None


class PtyCreate(legacy.PtyCreate):
    model_config = ConfigDict(extra="forbid")


class PtySize(legacy.PtySize):
    model_config = ConfigDict(extra="forbid")


class PtyUpdate(legacy.PtyUpdate):
    model_config = ConfigDict(extra="forbid")
    size: PtySize | None = None


class ConnectKeyBody(_Body):
    key: str
    label: str | None = None


class ConnectOAuthBody(_Body):
    methodID: str
    inputs: dict[str, str]
    label: str | None = None


class OAuthComplete(_Body):
    code: str | None = None


class CredentialUpdate(_Body):
    label: str
