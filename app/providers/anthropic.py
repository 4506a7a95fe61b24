"""Anthropic's Messages API, natively, through the official ``anthropic`` SDK.

The SDK is imported when the first request is made, never when the server starts (start-up time is
measured). Our requests carry OpenAI-shaped chat messages; they are translated here into
Anthropic's content blocks (``tool_use`` in assistant turns, ``tool_result`` in user turns, images
from data URLs), and the SSE events (``message_start``, ``content_block_*``, ``message_delta``)
are turned back into provider events.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from app.providers._errors import error_object, http_error
from app.providers._sdk import SDKProvider
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

API_KEY_ENV = "ANTHROPIC_API_KEY"

# OpenCode's finish names for Anthropic's stop reasons (as the AI SDK maps them).
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content-filter",
}
_RETRYABLE_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
_DATA_URL = re.compile(r"^data:([^;,]+);base64,(.*)$", re.S)


def _image_block(url: str) -> dict[str, Any]:
    match = _DATA_URL.match(url)
    if match:
        return {"type": "image", "source": {"type": "base64", "media_type": match.group(1), "data": match.group(2)}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                blocks.append(_image_block(url))
    return blocks


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def anthropic_messages(
    messages: list[dict[str, Any]], thinking: dict[str, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Chat messages (OpenAI shape) as Anthropic messages: tool results become ``tool_result``
    blocks of a user message, and consecutive messages of one role are merged (the API wants the
    roles to alternate). ``thinking`` gives, per tool call id, the signed thinking blocks that
    preceded the call; the API wants them back in the assistant turn that made the call."""
    result: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if result and result[-1]["role"] == role:
            result[-1]["content"].extend(blocks)
        else:
            result.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        if role == "user":
            add("user", _user_blocks(message.get("content")))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            calls = message.get("tool_calls") or []
            for call in calls:
                blocks.extend((thinking or {}).get(call.get("id", ""), []))
                if blocks:
                    break
            if message.get("content"):
                blocks.append({"type": "text", "text": str(message["content"])})
            for call in calls:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "input": _arguments(function.get("arguments", "")),
                    }
                )
            add("assistant", blocks)
        elif role == "tool":
            content = message.get("content")
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.get("tool_call_id", ""),
                        "content": content if isinstance(content, str) else json.dumps(content),
                    }
                ],
            )
        elif role == "system" and message.get("content"):
            add("user", [{"type": "text", "text": str(message["content"])}])
    return result


def anthropic_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    result = []
    for tool in tools or []:
        function = tool.get("function") or {}
        spec: dict[str, Any] = {
            "name": function.get("name", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            spec["description"] = function["description"]
        result.append(spec)
    return result


def _error(provider_id: str, exc: Exception) -> ProviderError:
    """An SDK exception as a ProviderError (APIStatusError, connection errors, timeouts)."""
    import anthropic

    if isinstance(exc, anthropic.APIConnectionError):  # includes APITimeoutError
        return ProviderError(f"Connection error: {exc}", is_retryable=True)
    if not isinstance(exc, anthropic.APIStatusError):
        return ProviderError(str(exc))
    status = exc.status_code
    kind = error_object(exc.body).get("type")
    if kind == "overloaded_error" and status < 400:
        status = 529  # an ``error`` event inside a 200 stream
    return http_error(
        provider_id, status, exc.body, exc.response.headers, retryable=kind in _RETRYABLE_TYPES, fallback=str(exc)
    )


class AnthropicProvider(SDKProvider):
    """Anthropic's Messages API through ``AsyncAnthropic``, one client per (key, base URL, headers)."""

    label = "Anthropic"
    key_env = API_KEY_ENV

    def _client_class(self) -> Any:
        from anthropic import AsyncAnthropic  # base URL None: the SDK reads ANTHROPIC_BASE_URL

        return AsyncAnthropic

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "max_tokens": request.max_tokens or request.model.output_limit,
            "messages": anthropic_messages(request.messages, self._kept),
        }
        system = [{"type": "text", "text": text} for text in request.system if text]
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
        return body

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self._check_key()
        import anthropic

        body = self._body(request)
        headers = {"x-opencode-session-id": request.session_id} if request.session_id else {}
        usage, finish = Usage(), "unknown"
        blocks: dict[int, dict[str, Any]] = {}  # content blocks being streamed, by index
        thinking: list[dict[str, Any]] = []
        try:
            events = await self._sdk().messages.create(**body, stream=True, extra_headers=headers)
            async for event in events:
                kind = event.type
                if kind == "message_start":
                    raw = event.message.usage
                    usage.input = int(raw.input_tokens or 0)
                    usage.output = int(raw.output_tokens or 0)
                    usage.cache_read = int(getattr(raw, "cache_read_input_tokens", 0) or 0)
                    usage.cache_write = int(getattr(raw, "cache_creation_input_tokens", 0) or 0)
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name, "json": ""}
                        yield ToolInputStart(block.id, block.name)
                    elif block.type == "thinking":
                        blocks[event.index] = {"type": "thinking", "thinking": block.thinking or "", "signature": ""}
                        if block.thinking:
                            yield ReasoningDelta(block.thinking)
                    elif block.type == "redacted_thinking":
                        thinking.append({"type": "redacted_thinking", "data": block.data})
                    elif block.type == "text" and block.text:
                        yield TextDelta(block.text)
                elif kind == "content_block_delta":
                    delta = event.delta
                    current = blocks.get(event.index)
                    if delta.type == "text_delta":
                        yield TextDelta(delta.text)
                    elif delta.type == "thinking_delta":
                        if current is not None:
                            current["thinking"] += delta.thinking
                        yield ReasoningDelta(delta.thinking)
                    elif delta.type == "signature_delta" and current is not None:
                        current["signature"] += delta.signature
                    elif delta.type == "input_json_delta" and current is not None:
                        current["json"] += delta.partial_json
                elif kind == "content_block_stop":
                    current = blocks.pop(event.index, None)
                    if current is None:
                        continue
                    if current["type"] == "thinking":
                        thinking.append(current)
                    elif current["type"] == "tool_use":
                        if thinking:
                            self._keep(current["id"], thinking)
                        yield ToolCall(current["id"], current["name"], current["json"] or "{}")
                elif kind == "message_delta":
                    if event.delta.stop_reason:
                        finish = _FINISH.get(event.delta.stop_reason, "unknown")
                    raw = event.usage
                    usage.output = int(raw.output_tokens or usage.output)
                    if getattr(raw, "input_tokens", None):
                        usage.input = int(raw.input_tokens)
                    if getattr(raw, "cache_read_input_tokens", None):
                        usage.cache_read = int(raw.cache_read_input_tokens)
                    if getattr(raw, "cache_creation_input_tokens", None):
                        usage.cache_write = int(raw.cache_creation_input_tokens)
        except anthropic.AnthropicError as exc:
            raise _error(self.id, exc) from exc
        yield Finish(finish, usage)
