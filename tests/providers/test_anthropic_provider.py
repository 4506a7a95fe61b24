"""The built-in Anthropic provider (``anthropic/<model>`` with no provider block), against a local
stub on 127.0.0.1 speaking the Messages API's SSE events."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.anthropic_stub import (
    MODEL_ID,
    Answer,
    Stub,
    anthropic_stub,
    message,
    text,
    thinking,
    title_or,
    tool_use,
)
from tests.helpers import assistant_text, create_session, text_prompt

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def stub(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    with anthropic_stub(monkeypatch) as handle:
        (project_dir / "opencode.json").write_text(json.dumps({"model": f"anthropic/{MODEL_ID}"}))
        yield handle


def test_text_turn_streams_and_completes_with_tokens(stub: Stub, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi there")).json()
    assert "error" not in reply["info"], reply["info"]
    assert reply["info"]["providerID"] == "anthropic" and reply["info"]["modelID"] == MODEL_ID
    assert assistant_text(reply) == "Hello there"
    finish = reply["parts"][-1]
    assert finish["type"] == "step-finish" and finish["reason"] == "stop"
    assert finish["tokens"]["input"] == 21 and finish["tokens"]["output"] == 9
    assert finish["tokens"]["cache"] == {"read": 5, "write": 7}
    request = stub.chat()[0]
    assert request["model"] == MODEL_ID and request["stream"] is True and request["max_tokens"] > 0
    assert request["system"][0]["type"] == "text" and "opensession" in request["system"][0]["text"]
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]
    sent = stub.headers[0]
    assert sent.get("x-api-key") == "sk-ant-test" or sent.get("authorization") == "Bearer sk-ant-test"


def test_tool_use_runs_our_tool_and_sends_the_tool_result_back(
    stub: Stub, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "hello.txt").write_text("hello from file\n")

    def answer(body: dict[str, Any]) -> Answer:
        last = body["messages"][-1]["content"]
        if any(block["type"] == "tool_result" for block in last):
            return Answer(message(text(0, "The file says hello.")))
        return Answer(
            message(
                thinking(0, "I should read ", "the file."),
                text(1, "Reading it."),
                tool_use(2, "toolu_1", "read", json.dumps({"filePath": "hello.txt"})),
                stop="tool_use",
            )
        )

    stub.answer = title_or(answer)
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("what does hello.txt say?")).json()
    assert assistant_text(reply) == "The file says hello."
    first, second = stub.chat()
    assert {t["name"] for t in first["tools"]} >= {"read", "write", "bash"}
    read = next(t for t in first["tools"] if t["name"] == "read")
    assert read["input_schema"]["type"] == "object" and read["description"]
    assistant, results = second["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "I should read the file.", "signature": "sig-123"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"filePath": "hello.txt"}},
    ]
    assert results["role"] == "user" and len(results["content"]) == 1
    result = results["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert "1: hello from file" in result["content"]
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"].get("finish") for m in history[1:]] == ["tool-calls", "stop"]
    first_step = history[1]["parts"]
    reasoning = [p for p in first_step if p["type"] == "reasoning"]
    assert [p["text"] for p in reasoning] == ["I should read the file."]
    tool = next(p for p in first_step if p["type"] == "tool")
    assert tool["callID"] == "toolu_1" and tool["state"]["status"] == "completed"


def test_thinking_becomes_reasoning_parts(stub: Stub, client: httpx.Client) -> None:
    stub.answer = title_or(lambda _body: Answer(message(thinking(0, "Let me ", "think."), text(1, "Done."))))
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("think")).json()
    assert [p["type"] for p in reply["parts"]] == ["step-start", "reasoning", "text", "step-finish"]
    assert reply["parts"][1]["text"] == "Let me think."
    assert assistant_text(reply) == "Done."


def _turn_calls(answer: Callable[[int], Answer]) -> tuple[Callable[[dict[str, Any]], Answer], dict[str, int]]:
    calls = {"n": 0}

    def reply(_body: dict[str, Any]) -> Answer:
        calls["n"] += 1
        return answer(calls["n"])

    return title_or(reply), calls


def test_overloaded_529_is_retried_then_answered(stub: Stub, client: httpx.Client) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    stub.answer, calls = _turn_calls(
        lambda n: (
            Answer(status=529, body=overloaded, headers={"retry-after-ms": "5"})
            if n == 1
            else Answer(message(text(0, "recovered")))
        )
    )
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("please")).json()
    assert "error" not in reply["info"], reply["info"]
    assert assistant_text(reply) == "recovered"
    assert calls["n"] == 2


def test_overloaded_error_event_mid_stream_is_retried(stub: Stub, client: httpx.Client) -> None:
    error = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    stub.answer, calls = _turn_calls(
        lambda n: (
            Answer([*message(text(0, "par"))[:2], error], headers={"retry-after-ms": "5"})
            if n == 1
            else Answer(message(text(0, "whole")))
        )
    )
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("please")).json()
    assert "error" not in reply["info"], reply["info"]
    assert assistant_text(reply) == "whole"
    assert calls["n"] == 2


def test_unauthorized_is_a_provider_auth_error(stub: Stub, client: httpx.Client) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    stub.answer, calls = _turn_calls(lambda _n: Answer(status=401, body=body))
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("x")).json()
    assert reply["info"]["error"] == {
        "name": "ProviderAuthError",
        "data": {"providerID": "anthropic", "message": "invalid x-api-key"},
    }
    assert calls["n"] == 1


def test_missing_key_names_the_environment_variable(
    stub: Stub, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("x")).json()
    error = reply["info"]["error"]
    assert error["name"] == "ProviderAuthError" and error["data"]["providerID"] == "anthropic"
    assert "ANTHROPIC_API_KEY" in error["data"]["message"]
    assert stub.chat() == []


def test_provider_block_sets_key_and_base_url(
    stub: Stub, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    options = {"apiKey": "sk-ant-config", "baseURL": stub.url}
    config = {"model": f"anthropic/{MODEL_ID}", "provider": {"anthropic": {"options": options}}}
    (project_dir / "opencode.json").write_text(json.dumps(config))
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi")).json()
    assert assistant_text(reply) == "Hello there"
    sent = stub.headers[0]
    assert sent.get("x-api-key") == "sk-ant-config" or sent.get("authorization") == "Bearer sk-ant-config"


def test_max_tokens_stop_is_length(stub: Stub, client: httpx.Client) -> None:
    stub.answer = title_or(lambda _body: Answer(message(text(0, "cut"), stop="max_tokens")))
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("long")).json()
    assert reply["parts"][-1]["reason"] == "length"


def test_chat_messages_become_content_blocks(database_url: str) -> None:
    # (no server: ``database_url`` is only here because the module's parametrization names it)
    from app.providers.anthropic import anthropic_messages

    png = "data:image/png;base64,iVBORw0KGgo="
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": png}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
        {"role": "user", "content": "and now?"},
    ]
    assert anthropic_messages(messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
