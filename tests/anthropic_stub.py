"""A local stand-in for Anthropic's Messages API on 127.0.0.1: it records each request body and
headers and answers with the API's real SSE events (or an HTTP error), so the official SDK, pointed
at it by ``ANTHROPIC_BASE_URL``, talks to it as to the real thing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.servers import StubHandler, stub_server

MODEL_ID = "claude-stub-1"


@dataclass
class Answer:
    """SSE events to stream, or an HTTP error ``status`` with a JSON ``body``."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class AnthropicStub:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], Answer] = lambda _body: Answer(message(text(0, "Hello", " there")))

    def chat(self) -> list[dict[str, Any]]:
        """The turn's requests (not the title generator's)."""
        return [r for r in self.requests if "title generator" not in json.dumps(r.get("system", ""))]


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


def _handler(stub: AnthropicStub) -> type[StubHandler]:
    class Handler(StubHandler):
        def do_POST(self) -> None:
            answer = stub.answer(self.record(stub.requests, stub.headers))
            if answer.status != 200:
                self.answer_error(answer.status, json.dumps(answer.body or {}).encode(), answer.headers)
                return
            self.start_stream(answer.headers)
            for event, data in answer.events:
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

    return Handler


def title_or(answer: Callable[[dict[str, Any]], Answer]) -> Callable[[dict[str, Any]], Answer]:
    def reply(body: dict[str, Any]) -> Answer:
        if "title generator" in json.dumps(body.get("system", "")):
            return Answer(message(text(0, "A title")))
        return answer(body)

    return reply


@contextmanager
def anthropic_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicStub]:
    """A running stub, with the key and base URL the built-in provider reads from the environment."""
    handle = AnthropicStub()
    with stub_server(_handler(handle)) as url:
        handle.url = url
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        yield handle
