"""The one streaming interface every model provider implements.

A provider turns a ``ChatRequest`` into an async stream of ``TextDelta`` / ``ReasoningDelta``
events ending in one ``Finish``. Failures are raised as ``ProviderError`` carrying OpenCode's
named-error fields, so the runner can decide about retries without knowing the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens, as models.dev and opencode.json express them."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelInfo:
    provider_id: str
    model_id: str
    name: str
    context_limit: int = 128_000
    output_limit: int = 4_096
    cost_input: float = 0.0  # USD per million tokens, as models.dev and opencode.json express it
    cost_output: float = 0.0
    cost_cache_read: float = 0.0
    cost_cache_write: float = 0.0
    # models.dev's ``context_over_200k``: the prices when a request's input exceeds 200k tokens.
    cost_over_200k: Prices | None = None
    family: str = ""
    release_date: str = ""
    status: str = "active"
    temperature: bool = True
    reasoning: bool = True
    attachment: bool = False
    toolcall: bool = True
    modalities_input: tuple[str, ...] = ("text",)
    modalities_output: tuple[str, ...] = ("text",)
    # The AI SDK package OpenCode would call the model with: decides its generated variants and
    # how options are spelled on the wire.
    npm: str = "@ai-sdk/openai-compatible"
    # False when neither opencode.json nor the catalog gives the output limit (``output_limit`` is
    # then a guess, and a call may ask for as many tokens as OpenCode would).
    output_known: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)  # provider.<id>.models.<id>.options
    headers: Mapping[str, str] = field(default_factory=dict)  # provider.<id>.models.<id>.headers
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # generated, then configured
    # provider.<id>.options without the connection keys (apiKey, baseURL, headers, timeouts).
    provider_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prices(self) -> Prices:
        return Prices(self.cost_input, self.cost_output, self.cost_cache_read, self.cost_cache_write)


@dataclass(slots=True)
class ChatRequest:
    """One model call, provider-neutral.

    ``messages`` use OpenAI's chat format. A user message's ``content`` is a string, or a list of
    parts: ``{"type": "text", "text"}``, ``{"type": "image_url", "image_url": {"url": <data URL>}}``
    and ``{"type": "file", "file": {"filename", "file_data": <data URL>}}`` (PDFs and other
    documents); each provider translates them into its own API's blocks. A ``tool`` message's
    ``content`` is a string, or, when the tool attached images or PDFs, a list of such parts (its
    output first): a provider whose API takes no media in tool results sends them after the
    results in a user message (``media.TOOL_ATTACHMENTS_PROMPT``). Parts a model cannot take
    (``ModelInfo.modalities_input``) were already replaced by text (``media.refusal``).

    ``options`` are the provider options OpenCode passes to the AI SDK, in its camelCase keys
    (``reasoningEffort``, ``reasoningSummary``, ``textVerbosity``, ``thinking: {type,
    budgetTokens}``, ...): OpenCode's defaults for the model, the model's options from
    opencode.json, the agent's, then the chosen variant's (see ``app.providers.options``). A
    provider uses the keys it knows and ignores the rest.
    """

    model: ModelInfo
    system: list[str]
    messages: list[dict[str, Any]]
    attempt: int = 1
    session_id: str | None = None
    max_tokens: int | None = None
    # Function tools the model may call, in OpenAI's shape: {"type": "function", "function": {...}}.
    tools: list[dict[str, Any]] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    headers: dict[str, str] = field(default_factory=dict)  # extra request headers (model/agent options)

    def sampling(self) -> dict[str, float]:
        """``temperature`` and ``top_p`` as body fields, those that are set."""
        return {k: v for k, v in (("temperature", self.temperature), ("top_p", self.top_p)) if v is not None}

    def session_headers(self) -> dict[str, str]:
        """The headers OpenCode 1.18 sends with every model call (a gateway keeps a session on
        one backend by them), then the call's own."""
        session = {"x-session-affinity": self.session_id, "x-session-id": self.session_id} if self.session_id else {}
        return session | self.headers

    def offers(self, tool: str) -> bool:
        return any(t["function"]["name"] == tool for t in self.tools or [])


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    """Reasoning text; ``starts_part`` opens a new reasoning part even right after another one
    (each of OpenAI's reasoning summary parts is a part of its own in OpenCode)."""

    text: str
    starts_part: bool = False


@dataclass(slots=True)
class ToolInputStart:
    """The model began a tool call (its arguments are still streaming)."""

    call_id: str
    name: str


@dataclass(slots=True)
class ToolCall:
    """A complete tool call: ``arguments`` is the raw JSON text the model produced."""

    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Usage:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @classmethod
    def inclusive(cls, input: int, cached: int, output: int, reasoning: int, cache_write: int = 0) -> Usage:
        """From OpenAI's counts, where input includes the cached (read and written) tokens and
        output the reasoning tokens: split as OpenCode's ``getUsage`` does, so that each token is
        counted, and priced, once."""
        return cls(
            input=max(0, input - cached - cache_write),
            output=max(0, output - reasoning),
            reasoning=reasoning,
            cache_read=cached,
            cache_write=cache_write,
        )


@dataclass(slots=True)
class Finish:
    reason: str  # OpenCode's finish names: stop, length, tool-calls, content-filter, error, unknown
    usage: Usage = field(default_factory=Usage)


StreamEvent = TextDelta | ReasoningDelta | ToolInputStart | ToolCall | Finish


class ProviderError(Exception):
    """A failed model call, described with the fields of OpenCode's named errors."""

    def __init__(
        self,
        message: str,
        *,
        name: str = "APIError",
        status_code: int | None = None,
        is_retryable: bool = False,
        response_headers: dict[str, str] | None = None,
        response_body: str | None = None,
        provider_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider_id = provider_id
        self.message = message
        self.name = name
        self.status_code = status_code
        self.is_retryable = is_retryable
        self.response_headers = response_headers or {}
        self.response_body = response_body

    def to_named_error(self) -> dict[str, Any]:
        if self.name == "APIError":
            data: dict[str, Any] = {"message": self.message, "isRetryable": self.is_retryable}
            if self.status_code is not None:
                data["statusCode"] = self.status_code
            if self.response_headers:
                data["responseHeaders"] = self.response_headers
            if self.response_body is not None:
                data["responseBody"] = self.response_body
            return {"name": "APIError", "data": data}
        if self.name == "ProviderAuthError":
            return {"name": self.name, "data": {"providerID": self.provider_id or "", "message": self.message}}
        return {"name": self.name, "data": {"message": self.message}}


def missing_key_message(name: str, provider_id: str, env_vars: Sequence[str]) -> str:
    """What a ProviderAuthError says when a provider that needs a key has none: where a key may
    come from, naming its environment variable as OpenCode's SDK errors do."""
    env = " or ".join(env_vars) or "its API key variable"
    return (
        f"{name} API key is missing: set {env}, set provider.{provider_id}.options.apiKey in "
        f"opencode.json, or connect the provider (/connect)"
    )


class Provider(Protocol):
    id: str

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...
