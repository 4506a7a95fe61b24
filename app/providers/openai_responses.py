"""OpenAI's Responses API (``POST /v1/responses``), natively, through the official ``openai`` SDK:
what OpenCode calls for ``openai/<model>`` (the AI SDK's ``@ai-sdk/openai``).

The SDK is imported when the first request is made, never when the server starts. Our chat
messages (OpenAI's chat shape) become Responses input items: user ``input_text`` /
``input_image`` / ``input_file`` parts, assistant ``output_text`` messages, ``function_call`` and
``function_call_output`` items. Requests are sent with ``store: false`` as OpenCode does, so the
API keeps nothing: the reasoning items a response produced before a tool call (with their
encrypted content) are kept here and sent back with that call on the next step.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from app.providers._errors import OVERFLOW, http_error
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

# OpenCode's finish names for an incomplete response's reason (as the AI SDK maps them).
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content-filter"}
# Error codes of a failed response (``response.failed``, ``error`` events) worth retrying.
_RETRYABLE_CODES = re.compile(r"rate_limit|server_error|overloaded|unavailable|exhausted|timeout", re.I)


def _user_content(content: Any) -> list[dict[str, Any]]:
    """A user message's content as Responses input parts (the neutral parts of ``ChatRequest``)."""
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            parts.append({"type": "input_text", "text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                parts.append({"type": "input_image", "image_url": url})
        elif kind == "file":
            file = part.get("file") or {}
            data = file.get("file_data")
            if not isinstance(data, str):
                continue
            if data.startswith("data:image/"):
                parts.append({"type": "input_image", "image_url": data})
            else:
                parts.append({"type": "input_file", "filename": file.get("filename") or "file", "file_data": data})
    return parts


def responses_input(
    messages: list[dict[str, Any]], reasoning: dict[str, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Chat messages as Responses input items. ``reasoning`` gives, per tool call id, the
    reasoning items (with encrypted content) that led to the call; they go back in the assistant
    turn that made it, as the API wants when nothing is stored."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            content = _user_content(message.get("content"))
            if content:
                items.append({"role": "user", "content": content})
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            # Each call's reasoning goes back where it was produced: the first call's before the
            # text (it came first), a later call's right before that call.
            before = [(reasoning or {}).get(call.get("id", ""), []) for call in calls]
            if before:
                items.extend(before[0])
            if message.get("content"):
                text = str(message["content"])
                items.append({"role": "assistant", "content": [{"type": "output_text", "text": text}]})
            for index, call in enumerate(calls):
                function = call.get("function") or {}
                if index:
                    items.extend(before[index])
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            result = message.get("content")
            output = result if isinstance(result, str) else json.dumps(result)
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""), "output": output})
        elif role == "system" and message.get("content"):
            items.append({"role": "system", "content": str(message["content"])})
    return items


def responses_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Chat-shaped function tools as Responses tools (flat, not strict, as the AI SDK sends them)."""
    result = []
    for tool in tools or []:
        function = tool.get("function") or {}
        result.append(
            {
                "type": "function",
                "name": function.get("name", ""),
                "description": function.get("description"),
                "parameters": function.get("parameters") or {"type": "object", "properties": {}},
                "strict": False,
            }
        )
    return result


def request_body(request: ChatRequest, reasoning: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The ``responses.create`` arguments for a request, as the AI SDK builds them from OpenCode's
    options: nothing stored, the session as prompt cache key, reasoning settings and encrypted
    reasoning for reasoning models (which take no sampling parameters)."""
    model = request.model
    options = request.options  # tuned by the runner (OpenCode's defaults, the model's, the agent's, the variant)
    # Reasoning models take instructions as developer messages, the others as system messages.
    role = "developer" if model.reasoning else "system"
    system = [{"role": role, "content": text} for text in request.system if text]
    body: dict[str, Any] = {
        "model": model.model_id,
        "input": system + responses_input(request.messages, reasoning),
        "max_output_tokens": request.max_tokens or model.output_limit,
        "store": bool(options.get("store", False)),
    }
    if request.session_id or options.get("promptCacheKey"):
        body["prompt_cache_key"] = options.get("promptCacheKey") or request.session_id
    if request.tools:
        body["tools"] = responses_tools(request.tools)
    if model.reasoning:
        settings = {"effort": options.get("reasoningEffort"), "summary": options.get("reasoningSummary")}
        settings = {k: v for k, v in settings.items() if v is not None}
        if settings:
            body["reasoning"] = settings
    else:
        if request.temperature is not None and model.temperature:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
    include = list(options.get("include") or [])
    if model.reasoning and not body["store"] and "reasoning.encrypted_content" not in include:
        include.append("reasoning.encrypted_content")  # nothing is stored: carry it ourselves
    if include:
        body["include"] = include
    if options.get("textVerbosity"):
        body["text"] = {"verbosity": options["textVerbosity"]}
    if options.get("parallelToolCalls") is not None:
        body["parallel_tool_calls"] = bool(options["parallelToolCalls"])
    return body


def _failure(code: str | None, message: str | None) -> ProviderError:
    """A failure reported inside the stream (``response.failed``, an ``error`` event)."""
    code, message = code or "", message or ""
    if OVERFLOW.search(message) or OVERFLOW.search(code):
        return ProviderError(message or code, name="ContextOverflowError")
    return ProviderError(
        message or code or "The response failed",
        is_retryable=bool(_RETRYABLE_CODES.search(code)),
        response_body=json.dumps({"code": code, "message": message}),
    )


def _error(provider_id: str, exc: Exception) -> ProviderError:
    """An SDK exception as a ProviderError (status errors, connection errors and timeouts, and an
    ``{"error": ...}`` event the SDK raises itself)."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return ProviderError(f"Connection error: {exc}", is_retryable=True)
    if isinstance(exc, openai.APIStatusError):
        response = exc.response
        return http_error(provider_id, exc.status_code, response.text or exc.body, response.headers, fallback=str(exc))
    if isinstance(exc, openai.APIError):
        return _failure(exc.code or exc.type, exc.message)
    return ProviderError(str(exc))


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    details = getattr(raw, "input_tokens_details", None)
    output_details = getattr(raw, "output_tokens_details", None)
    return Usage.inclusive(
        int(raw.input_tokens or 0),
        int(getattr(details, "cached_tokens", 0) or 0),
        int(raw.output_tokens or 0),
        int(getattr(output_details, "reasoning_tokens", 0) or 0),
        int(getattr(details, "cache_write_tokens", 0) or 0),
    )


def _reasoning_item(item: Any) -> dict[str, Any]:
    """A finished reasoning output item as the input item that carries it into the next step."""
    kept: dict[str, Any] = {
        "type": "reasoning",
        "id": item.id,
        "summary": [{"type": "summary_text", "text": part.text} for part in item.summary or []],
    }
    if getattr(item, "encrypted_content", None):
        kept["encrypted_content"] = item.encrypted_content
    return kept


def _finish(response: Any, called: bool) -> str:
    """OpenCode's finish name for a completed or incomplete response."""
    details = getattr(response, "incomplete_details", None)
    reason = getattr(details, "reason", None)
    if reason is None:
        return "tool-calls" if called else "stop"
    return _INCOMPLETE.get(reason, "tool-calls" if called else "unknown")


class OpenAIResponsesProvider(SDKProvider):
    """OpenAI's Responses API through ``AsyncOpenAI``, one client per connection. The SDK's base
    URL means what OpenCode's does (``https://api.openai.com/v1`` + ``/responses``)."""

    def _client_class(self) -> Any:
        from openai import AsyncOpenAI  # base URL None: the SDK reads OPENAI_BASE_URL

        return AsyncOpenAI

    def _http_client(self) -> Any:
        from openai import DefaultAioHttpClient

        return DefaultAioHttpClient()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self._check_key()
        import openai

        body = request_body(request, self._kept)
        # OpenCode's OpenAI provider names itself and the session (prompt caching) too.
        session = {"originator": "opencode", "session-id": request.session_id} if request.session_id else {}
        headers = session | request.session_headers()
        calls: dict[str, dict[str, str]] = {}  # function calls being streamed, by item id
        reasoning: list[dict[str, Any]] = []  # this response's finished reasoning items
        summary: tuple[str, int] | None = None  # the reasoning summary part being streamed
        called = False
        finish: Finish | None = None
        try:
            events = await self._sdk().responses.create(**body, stream=True, extra_headers=headers)
            async for event in events:
                kind = event.type
                if kind == "response.output_text.delta":
                    yield TextDelta(event.delta)
                elif kind == "response.reasoning_summary_text.delta":
                    part = (event.item_id, event.summary_index)
                    yield ReasoningDelta(event.delta, starts_part=part != summary)
                    summary = part
                elif kind == "response.output_item.added" and event.item.type == "function_call":
                    item = event.item
                    calls[item.id] = {"call_id": item.call_id, "name": item.name, "arguments": ""}
                    yield ToolInputStart(item.call_id, item.name)
                elif kind == "response.function_call_arguments.delta" and event.item_id in calls:
                    calls[event.item_id]["arguments"] += event.delta
                elif kind == "response.function_call_arguments.done" and event.item_id in calls:
                    calls[event.item_id]["arguments"] = event.arguments
                elif kind == "response.output_item.done":
                    item = event.item
                    if item.type == "reasoning":
                        reasoning.append(_reasoning_item(item))
                    elif item.type == "function_call":
                        called = True
                        streamed = calls.pop(item.id, None) or {}
                        arguments = item.arguments or streamed.get("arguments") or "{}"
                        if reasoning:  # the reasoning since the previous call led to this one
                            self._keep(item.call_id, reasoning)
                            reasoning = []
                        yield ToolCall(item.call_id, item.name, arguments)
                elif kind in ("response.completed", "response.incomplete"):
                    # Read on to the end of the body: a connection closed early is not reused.
                    finish = Finish(_finish(event.response, called), _usage(event.response.usage))
                elif kind == "response.failed":
                    error = event.response.error
                    raise _failure(getattr(error, "code", None), getattr(error, "message", None))
                elif kind == "error":
                    raise _failure(event.code, event.message)
        except openai.OpenAIError as exc:
            raise _error(self.id, exc) from exc
        if finish is None:  # the connection ended before the response did (a proxy or server went away)
            raise ProviderError("The response stream ended before the response completed", is_retryable=True)
        yield finish
