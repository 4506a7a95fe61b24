"""Anthropic's Messages API, natively, through the official ``anthropic`` SDK.

The SDK is imported when the first request is made, never when the server starts (start-up time is
measured). Our requests carry OpenAI-shaped chat messages; they are translated here into
Anthropic's content blocks (``tool_use`` in assistant turns, ``tool_result`` in user turns, images
and PDF documents in user turns and tool results), and the SSE events (``message_start``,
``content_block_*``, ``message_delta``) are turned back into provider events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

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
from app.providers.media import split_data_url
from app.providers.options import thinking_budget

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
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")  # what the API accepts


def _source(url: str, media_type: str | None = None) -> dict[str, Any]:
    """A block's ``source``: base64 from a data URL, else the URL itself (the API fetches it)."""
    parts = split_data_url(url)
    if parts is not None:
        return {"type": "base64", "media_type": media_type or parts[0], "data": parts[1]}
    return {"type": "url", "url": url}


def _attachment_block(part: dict[str, Any]) -> dict[str, Any] | None:
    """An ``image_url`` or ``file`` content part as an image or document block; a type the API
    does not take becomes a text note instead of a rejected request."""
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            return None
        parts = split_data_url(url)
        if url.startswith("data:") and (parts is None or parts[0] not in _IMAGE_TYPES):  # SVG, BMP, ...
            mime = url[5:].split(",")[0].split(";")[0]
            return {
                "type": "text",
                "text": f"[Attached {mime}: not sent, the model takes JPEG, PNG, GIF and WebP images]",
            }
        return {"type": "image", "source": _source(url)}
    document = part.get("file")
    if not isinstance(document, dict) or not isinstance(document.get("file_data"), str):
        return None
    url, name = document["file_data"], document.get("filename")
    mime = (split_data_url(url) or ("application/pdf",))[0]
    if mime != "application/pdf":
        return {"type": "text", "text": f"[Attached {mime}: {name or 'file'}, not sent, the model takes PDF documents]"}
    block: dict[str, Any] = {"type": "document", "source": _source(url, "application/pdf")}
    if name:
        block["title"] = name
    return block


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    """A user message's (or tool result's) content as blocks: text, images, PDF documents."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if part.get("type") == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") in ("image_url", "file"):
            block = _attachment_block(part)
            if block is not None:
                blocks.append(block)
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
                        "content": content if isinstance(content, str) else _user_blocks(content),
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


def _opencode_path(base_url: str) -> Callable[[Any], Awaitable[None]]:
    """A request hook turning the SDK's ``<base>/v1/<path>`` into OpenCode's ``<base>/<path>``."""
    base = urlsplit(base_url).path.rstrip("/")
    sdk_prefix = f"{base}/v1/"

    async def rewrite(request: Any) -> None:
        path: str = request.url.path
        if path.startswith(sdk_prefix):
            request.url = request.url.copy_with(path=f"{base}/{path[len(sdk_prefix) :]}")

    return rewrite


class AnthropicProvider(SDKProvider):
    """Anthropic's Messages API through ``AsyncAnthropic``, one client per connection.

    OpenCode's ``baseURL`` is the prefix ``/messages`` is appended to (``https://api.anthropic.com/v1``,
    a gateway's ``http://proxy/v1``); the SDK's is the prefix of ``/v1/messages``. The SDK is given
    OpenCode's URL and each request's path has the SDK's ``v1/`` taken out again, so any
    configured URL (with or without ``/v1``) is reached exactly as OpenCode reaches it."""

    def _client_class(self) -> Any:
        from anthropic import AsyncAnthropic  # base URL None: the SDK reads ANTHROPIC_BASE_URL

        return AsyncAnthropic

    def _http_client(self) -> Any:
        from anthropic import DefaultAioHttpClient

        base = self.connection.base_url
        if base is None:
            return DefaultAioHttpClient()
        return DefaultAioHttpClient(event_hooks={"request": [_opencode_path(base)]})

    def _default_headers(self) -> dict[str, str]:
        """The key in ``x-api-key`` too, as OpenCode's provider sends it (this SDK sends it as a
        bearer token; gateways that look for ``x-api-key`` find it), then opencode.json's."""
        key = self.connection.api_key
        return ({"x-api-key": key} if key else {}) | self._headers

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        """The Messages API body, with the call's options as the AI SDK's Anthropic provider sends
        them: ``thinking`` with its budget added to ``max_tokens`` (which counts thinking too) and
        no temperature or top_p (the API refuses them with thinking on). Keyword arguments of
        ``messages.create``."""
        budget = thinking_budget(request.options)
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "max_tokens": (request.max_tokens or request.model.output_limit) + budget,
            "messages": anthropic_messages(request.messages, self._kept),
        }
        system = [{"type": "text", "text": text} for text in request.system if text]
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
            if request.options.get("disableParallelToolUse") is True:
                body["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        else:  # the SDK's signature no longer names them; the API still takes them
            if request.sampling():
                body["extra_body"] = request.sampling()
        return body

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self._check_key()
        import anthropic

        body = self._body(request)
        headers = request.session_headers()
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
