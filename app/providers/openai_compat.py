"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, OpenRouter...),
configured as OpenCode users already do with ``@ai-sdk/openai-compatible`` in opencode.json."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.jsonutil import dumpb
from app.providers import http
from app.providers._errors import http_error
from app.providers.base import (
    ChatRequest,
    Finish,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolInputStart,
    Usage,
)
from app.providers.connection import Connection
from app.providers.media import TOOL_ATTACHMENTS_PROMPT
from app.providers.options import GOOGLE_PACKAGE, OPENAI_PACKAGE

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}
# Options the AI SDK's openai-compatible package renames; any other option is sent as it is.
_COMPATIBLE_KEYS = {"user": "user", "reasoningEffort": "reasoning_effort", "textVerbosity": "verbosity"}
# Options OpenAI's chat API takes (the AI SDK's openai package); others are not sent to it.
_OPENAI_KEYS = _COMPATIBLE_KEYS | {
    "logitBias": "logit_bias",
    "logprobs": "logprobs",
    "parallelToolCalls": "parallel_tool_calls",
    "maxCompletionTokens": "max_completion_tokens",
    "store": "store",
    "metadata": "metadata",
    "prediction": "prediction",
    "serviceTier": "service_tier",
    "promptCacheKey": "prompt_cache_key",
    "safetyIdentifier": "safety_identifier",
}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _gemini_fields(options: dict[str, Any]) -> dict[str, Any]:
    """Gemini's OpenAI-compatible endpoint refuses fields it does not know: of the options
    OpenCode gives Google's models, the thinking settings go where that endpoint takes them
    (``extra_body.google.thinking_config``, snake case), ``reasoningEffort`` as itself."""
    fields: dict[str, Any] = {}
    thinking = options.get("thinkingConfig")
    if isinstance(thinking, dict):
        config = {_snake(key): value for key, value in thinking.items()}
        fields["extra_body"] = {"google": {"thinking_config": config}}
    if "reasoningEffort" in options:
        fields["reasoning_effort"] = options["reasoningEffort"]
    return fields


def option_fields(request: ChatRequest) -> dict[str, Any]:
    """The call's sampling and options as chat-completions body fields, as the AI SDK's packages
    write them: OpenAI's reasoning models take ``max_completion_tokens`` and no sampling."""
    openai = request.model.npm == OPENAI_PACKAGE
    reasoning = openai and request.model.reasoning
    fields: dict[str, Any] = {}
    if request.max_tokens:
        fields["max_completion_tokens" if reasoning else "max_tokens"] = request.max_tokens
    if not reasoning:
        fields |= request.sampling()
    if request.model.npm == GOOGLE_PACKAGE:
        return fields | _gemini_fields(request.options)
    renamed = _OPENAI_KEYS if openai else _COMPATIBLE_KEYS
    for key, value in request.options.items():
        if key in renamed:
            fields[renamed[key]] = value
        elif not openai:
            fields[key] = value
    return fields


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return Usage()
    details = raw.get("completion_tokens_details") or {}
    prompt_details = raw.get("prompt_tokens_details") or {}
    return Usage.inclusive(
        int(raw.get("prompt_tokens") or 0),
        int(prompt_details.get("cached_tokens") or 0),
        int(raw.get("completion_tokens") or 0),
        int(details.get("reasoning_tokens") or 0),
    )


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages as chat completions takes them. Their user content parts already have its
    shape; a tool message's content must be text, so the images and PDFs a tool attached follow
    the calls' results in a user message (as OpenCode does for OpenAI-compatible APIs)."""
    result: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            result.append({"role": "user", "content": [{"type": "text", "text": TOOL_ATTACHMENTS_PROMPT}, *pending]})
            pending.clear()

    for message in messages:
        content = message.get("content")
        if message.get("role") != "tool":
            flush()
        elif isinstance(content, list):
            pending.extend(p for p in content if p.get("type") != "text")
            message = {**message, "content": "\n".join(p["text"] for p in content if p.get("type") == "text")}
        result.append(message)
    flush()
    return result


warm = http.warm  # what ``registry.load_modules`` runs on a thread before the first turn


class OpenAICompatibleProvider:
    """One HTTP client (a keep-alive connection pool) per connection, made on the first request;
    requests go to ``<base URL>/chat/completions``, as OpenCode's compatible provider sends them.
    A needed key that is missing fails each request with a ProviderAuthError saying so."""

    def __init__(self, connection: Connection) -> None:
        assert connection.base_url is not None, "the registry gives a compatible API its URL"
        self.id = connection.provider_id
        self.connection = connection
        self._url = httpx.URL(connection.base_url.rstrip("/") + "/chat/completions")  # parsed once
        auth = {"Authorization": f"Bearer {connection.api_key}"} if connection.api_key else {}
        self._headers = {**auth, "content-type": "application/json", **connection.header_map}
        self._client: http.ProviderClient | None = None

    def _http(self) -> http.ProviderClient:
        if self._client is None:
            timeout = httpx.Timeout(self.connection.timeout_s, connect=15.0)
            self._client = http.client(headers=self._headers, timeout=timeout)
        return self._client

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        missing = self.connection.missing_key()
        if missing is not None:
            raise missing
        system = [{"role": "system", "content": text} for text in request.system if text]
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "messages": system + chat_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        } | option_fields(request)
        if request.tools:
            body["tools"] = request.tools
        headers = request.session_headers()
        finish, usage = "unknown", Usage()
        calls: dict[int, dict[str, str]] = {}  # tool calls stream in pieces, keyed by index
        try:
            async with http.sse(self._http(), "POST", self._url, content=dumpb(body), headers=headers) as source:
                response = source.response
                if response.status_code >= 400:
                    text = (await response.aread()).decode(errors="replace")
                    raise http_error(self.id, response.status_code, text, response.headers)
                async for sse in source.aiter_sse():
                    if sse.data.strip() == "[DONE]":
                        continue  # read on to the end of the body: a connection closed early is not reused
                    chunk = json.loads(sse.data)
                    if chunk.get("error"):
                        raise ProviderError(str(chunk["error"].get("message", chunk["error"])), is_retryable=True)
                    if chunk.get("usage"):
                        usage = _usage(chunk["usage"])
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if reasoning:
                            yield ReasoningDelta(reasoning)
                        if delta.get("content"):
                            yield TextDelta(delta["content"])
                        for piece in delta.get("tool_calls") or []:
                            call = calls.setdefault(int(piece.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                            function = piece.get("function") or {}
                            started = bool(call["id"] and call["name"])
                            call["id"] = call["id"] or piece.get("id") or ""
                            call["name"] = call["name"] or function.get("name") or ""
                            call["arguments"] += function.get("arguments") or ""
                            if not started and call["id"] and call["name"]:
                                yield ToolInputStart(call["id"], call["name"])
                        if choice.get("finish_reason"):
                            finish = _FINISH.get(choice["finish_reason"], "unknown")
        except httpx.TransportError as exc:
            raise ProviderError(f"Connection error: {exc!r}", is_retryable=True) from exc
        except ValueError as exc:
            raise ProviderError(f"Malformed stream from provider: {exc}", is_retryable=False) from exc
        for index in sorted(calls):
            call = calls[index]
            yield ToolCall(call["id"] or f"call_{index}", call["name"], call["arguments"] or "{}")
        if calls and finish in ("stop", "unknown"):
            finish = "tool-calls"
        yield Finish(finish, usage)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
