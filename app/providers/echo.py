"""``opensession/echo``: the built-in offline model.

It answers ``Echo: <last user text>`` in several deltas, deterministically, so tests and demos need
no network. It takes text only: an image or PDF reaches it as OpenCode's error text for models
without that input, and is echoed with the rest. Directives anywhere in the last user text change
its behaviour:

- ``SLOW:<seconds>``   wait that long before each delta (abort and crash tests)
- ``REASON``           stream three reasoning deltas before the text
- ``FAIL:retry[:n]``   fail the first ``n`` attempts (default 1) with a retryable 503
- ``FAIL:fatal``       fail with a non-retryable 400
- ``FAIL:auth``        fail with ProviderAuthError
- ``TOOL:<name> <args>`` call a tool (one per line; several lines, several calls): ``<args>`` is
  a JSON object, or shorthand for the tool's main argument (``TOOL:bash ls``,
  ``TOOL:read notes.txt``). Calls happen only when the request offers the tool.
- ``THEN:<name> <args>`` the same, in the turn's second step (after the first calls' results), so
  a turn can run tools in a later step. ``TOOL!:``/``THEN!:`` call the tool even when it is not
  offered (a model inventing or mis-casing a tool name). When a step has no calls left and the last message is a
  tool result, the model answers ``Tool result seen: <start of the result>`` (``SLOW`` applies).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import AsyncIterator

from app.providers.base import (
    ChatRequest,
    Finish,
    ModelInfo,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolInputStart,
    Usage,
)

PROVIDER_ID = "opensession"
MODEL_ID = "echo"
ECHO_MODEL = ModelInfo(PROVIDER_ID, MODEL_ID, "Echo (offline)", context_limit=200_000, output_limit=8_192)

_SLOW = re.compile(r"SLOW:(\d+(?:\.\d+)?)")
_FAIL = re.compile(r"FAIL:(retry|fatal|auth)(?::(\d+))?")
_TITLE_SYSTEM_MARK = "title generator"
_CALLS_BY_STEP = (  # the directive whose calls a step makes, by the number of tool steps before it
    re.compile(r"^\s*TOOL(!?):([A-Za-z_]+)(?:[ \t]+(.*))?$", re.M),
    re.compile(r"^\s*THEN(!?):([A-Za-z_]+)(?:[ \t]+(.*))?$", re.M),
)
# The argument a shorthand directive fills for each tool (``TOOL:bash ls`` -> {"command": "ls"}).
_SHORTHAND = {
    "bash": "command",
    "read": "filePath",
    "list": "path",
    "glob": "pattern",
    "grep": "pattern",
    "task": "prompt",
}


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def split_deltas(text: str, pieces: int = 4) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _tool_steps_since_prompt(request: ChatRequest) -> int:
    """How many assistant tool-call steps follow the last user message."""
    steps = 0
    for message in reversed(request.messages):
        if message.get("role") == "user":
            break
        steps += bool(message.get("role") == "assistant" and message.get("tool_calls"))
    return steps


def _tool_calls(prompt: str, request: ChatRequest) -> list[ToolCall]:
    step = _tool_steps_since_prompt(request)
    if step >= len(_CALLS_BY_STEP):
        return []
    calls = []
    for index, match in enumerate(_CALLS_BY_STEP[step].finditer(prompt)):
        forced, name, rest = match.group(1), match.group(2), (match.group(3) or "").strip()
        if not forced and not request.offers(name):
            continue
        if rest.startswith("{"):
            arguments = rest
        elif name in _SHORTHAND:
            arguments = json.dumps(
                {_SHORTHAND[name]: rest} | ({"description": "echo directive"} if name == "bash" else {})
            )
        else:
            arguments = "{}"
        calls.append(ToolCall(f"call_echo_{secrets.token_hex(6)}_{index}", name, arguments))  # unique, as providers
    return calls


class EchoProvider:
    id = PROVIDER_ID

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        last = request.messages[-1] if request.messages else {}
        users = [m for m in request.messages if m.get("role") == "user"]
        prompt = _text_of(users[-1]["content"]) if users else ""
        if any(_TITLE_SYSTEM_MARK in s for s in request.system):
            title = prompt.strip().splitlines()[0][:50] if prompt.strip() else "Untitled"
            yield TextDelta(title)
            yield Finish("stop", Usage(input=_estimate_tokens(prompt), output=_estimate_tokens(title)))
            return
        if last.get("role") != "tool":
            self._maybe_fail(prompt, request.attempt)
        calls = _tool_calls(prompt, request)
        if calls:
            for call in calls:
                yield ToolInputStart(call.call_id, call.name)
            for call in calls:
                yield call
            yield Finish("tool-calls", Usage(input=_estimate_tokens(prompt), output=len(calls)))
            return
        slow = _SLOW.search(prompt)
        # Seconds before each piece (SLOW:x); 0 still lets the loop run, so the pieces arrive in
        # separate passes as a network stream's chunks do (else subscribers get them merged).
        delay = float(slow.group(1)) if slow else 0.0
        if last.get("role") == "tool":
            answer = "Tool result seen: " + _text_of(last.get("content")).replace("\n", " ")[:60]
            for piece in split_deltas(answer):
                await asyncio.sleep(delay)
                yield TextDelta(piece)
            yield Finish("stop", Usage(input=_estimate_tokens(answer), output=_estimate_tokens(answer)))
            return
        reasoning = "Thinking about the request." if "REASON" in prompt else ""
        for piece in split_deltas(reasoning, 3) if reasoning else []:
            await asyncio.sleep(delay)
            yield ReasoningDelta(piece)
        reply = f"Echo: {prompt}"
        for piece in split_deltas(reply):
            await asyncio.sleep(delay)
            yield TextDelta(piece)
        context = sum(_estimate_tokens(_text_of(m.get("content"))) for m in request.messages)
        usage = Usage(
            input=context, output=_estimate_tokens(reply), reasoning=_estimate_tokens(reasoning) if reasoning else 0
        )
        yield Finish("stop", usage)

    @staticmethod
    def _maybe_fail(prompt: str, attempt: int) -> None:
        match = _FAIL.search(prompt)
        if not match:
            return
        kind, count = match.group(1), int(match.group(2) or 1)
        if kind == "retry" and attempt <= count:
            raise ProviderError(
                "Service Unavailable: echo model asked to fail",
                status_code=503,
                is_retryable=True,
                response_headers={"retry-after-ms": "10"},
            )
        if kind == "fatal":
            raise ProviderError("Bad Request: echo model asked to fail", status_code=400, is_retryable=False)
        if kind == "auth":
            raise ProviderError(
                "Invalid API key (echo model asked to fail)", name="ProviderAuthError", provider_id=PROVIDER_ID
            )

    async def aclose(self) -> None:
        return None
