"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, OpenRouter...),
configured as OpenCode users already do with ``@ai-sdk/openai-compatible`` in opencode.json."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx_sse import aconnect_sse

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

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}
_OVERFLOW = re.compile(r"context.length|maximum context|context window|too many tokens|prompt is too long", re.I)
_HEADERS_KEPT = ("retry-after", "retry-after-ms", "x-request-id")


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return Usage()
    details = raw.get("completion_tokens_details") or {}
    prompt_details = raw.get("prompt_tokens_details") or {}
    cached = int(prompt_details.get("cached_tokens") or 0)
    return Usage(
        input=max(0, int(raw.get("prompt_tokens") or 0) - cached),
        output=int(raw.get("completion_tokens") or 0),
        reasoning=int(details.get("reasoning_tokens") or 0),
        cache_read=cached,
    )


def _error_from_response(provider_id: str, status: int, body: str, headers: httpx.Headers) -> ProviderError:
    message = body
    try:
        parsed = json.loads(body)
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
    except ValueError:
        pass
    kept = {k: headers[k] for k in _HEADERS_KEPT if k in headers}
    if status in (401, 403):
        return ProviderError(message or "Unauthorized", name="ProviderAuthError", provider_id=provider_id)
    if _OVERFLOW.search(message or ""):
        return ProviderError(message, name="ContextOverflowError", response_body=body)
    return ProviderError(
        message or f"HTTP {status}",
        status_code=status,
        is_retryable=status in (408, 409, 429) or status >= 500,
        response_headers=kept,
        response_body=body,
    )


class OpenAICompatibleProvider:
    """One HTTP client (a keep-alive connection pool) per provider, URL and key. ``missing_key``:
    the provider needs a key and has none; each request fails with a ProviderAuthError saying so."""

    def __init__(
        self,
        provider_id: str,
        base_url: str,
        api_key: str | None,
        headers: dict[str, str],
        *,
        missing_key: str | None = None,
    ) -> None:
        self.id = provider_id
        self._missing_key = missing_key
        self._url = base_url.rstrip("/") + "/chat/completions"
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers={**auth, **headers}, timeout=httpx.Timeout(300.0, connect=15.0), trust_env=False
        )

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if self._missing_key:
            raise ProviderError(self._missing_key, name="ProviderAuthError", provider_id=self.id)
        system = [{"role": "system", "content": text} for text in request.system if text]
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "messages": system + request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.max_tokens:
            body["max_tokens"] = request.max_tokens
        if request.tools:
            body["tools"] = request.tools
        headers = {"x-opencode-session-id": request.session_id} if request.session_id else {}
        finish, usage = "unknown", Usage()
        calls: dict[int, dict[str, str]] = {}  # tool calls stream in pieces, keyed by index
        done = False
        try:
            async with aconnect_sse(self._client, "POST", self._url, json=body, headers=headers) as source:
                response = source.response
                if response.status_code >= 400:
                    text = (await response.aread()).decode(errors="replace")
                    raise _error_from_response(self.id, response.status_code, text, response.headers)
                async for sse in source.aiter_sse():
                    # Read on to the end of the body after [DONE]: a response closed unread takes
                    # its connection with it, and the next turn would open a new one.
                    done = done or sse.data.strip() == "[DONE]"
                    if done:
                        continue
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
        await self._client.aclose()
