"""A local stand-in for Anthropic's Messages API on 127.0.0.1: it records each request body and
headers and answers with the API's real SSE events (or an HTTP error), so the official SDK, pointed
at it by ``ANTHROPIC_BASE_URL``, talks to it as to the real thing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.stubs import Answer, Stub, sse_stub

MODEL_ID = "claude-stub-1"


def message(*blocks: list[tuple[str, dict[str, Any]]], stop: str = "end_turn") -> list[tuple[str, dict[str, Any]]]:
    usage = {"input_tokens": 21, "output_tokens": 1, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 7}
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "model": MODEL_ID,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        },
    }
    events: list[tuple[str, dict[str, Any]]] = [("message_start", start), ("ping", {"type": "ping"})]
    for block in blocks:
        events += block
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    events = [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
    return [*events, ("content_block_stop", {"type": "content_block_stop", "index": index})]


def text(index: int, *pieces: str) -> list[tuple[str, dict[str, Any]]]:
    return _block(index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])


def thinking(index: int, *pieces: str) -> list[tuple[str, dict[str, Any]]]:
    deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces]
    deltas.append({"type": "signature_delta", "signature": "sig-123"})
    return _block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def tool_use(index: int, call_id: str, name: str, arguments: str) -> list[tuple[str, dict[str, Any]]]:
    half = len(arguments) // 2
    deltas = [{"type": "input_json_delta", "partial_json": p} for p in ("", arguments[:half], arguments[half:])]
    return _block(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, deltas)


def title_or(answer: Callable[[dict[str, Any]], Answer]) -> Callable[[dict[str, Any]], Answer]:
    def reply(body: dict[str, Any]) -> Answer:
        if "title generator" in json.dumps(body.get("system", "")):
            return Answer(message(text(0, "A title")))
        return answer(body)

    return reply


@contextmanager
def anthropic_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    """A running stub, with the key and base URL the built-in provider reads from the environment."""
    with sse_stub() as handle:
        handle.answer = lambda _body: Answer(message(text(0, "Hello", " there")))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", handle.url)
        yield handle
