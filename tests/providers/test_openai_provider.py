"""OpenAI-compatible models configured as OpenCode users do in opencode.json, against a local
stub server on 127.0.0.1."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.events.log import Transaction
from app.store.database import WriteScope
from tests.helpers import assistant_text, create_session, text_prompt, wait_until
from tests.servers import OpenAIStub, StubReply, openai_stub

MODEL = {"providerID": "stub", "modelID": "stub-model"}


def _write_config(directory: Path, base_url: str, **model: object) -> None:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": "stub/stub-model",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stub",
                "options": {"baseURL": base_url, "apiKey": "test-key"},
                "models": {"stub-model": {"name": "Stub Model", **model}},
            }
        },
    }
    (directory / "opencode.json").write_text(json.dumps(config))


@pytest.fixture
def stub(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        _write_config(project_dir, handle.url, cost={"input": 1.0, "output": 2.0})
        yield handle


def _chat_requests(stub: OpenAIStub) -> list[dict]:
    """Requests of the turn itself (the title request is the one with the title system prompt)."""
    return [r for r in stub.requests if "title generator" not in r["messages"][0]["content"]]


def test_streams_text_and_reasoning_with_usage(stub: OpenAIStub, client: httpx.Client) -> None:
    stub.reply = lambda _body: StubReply(content=["Hel", "lo", "!"], reasoning=["think", "ing"])
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi there")).json()
    assert reply["info"]["providerID"] == "stub" and reply["info"]["modelID"] == "stub-model"
    assert [p["type"] for p in reply["parts"]] == ["step-start", "reasoning", "text", "step-finish"]
    assert reply["parts"][1]["text"] == "thinking"
    assert assistant_text(reply) == "Hello!"
    finish = reply["parts"][-1]
    assert finish["reason"] == "stop"
    assert finish["tokens"]["input"] == 11 and finish["tokens"]["output"] == 3
    assert finish["cost"] == pytest.approx((11 * 1.0 + 3 * 2.0) / 1_000_000)
    request = _chat_requests(stub)[0]
    assert request["model"] == "stub-model" and request["stream"] is True
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1] == {"role": "user", "content": "hi there"}
    assert stub.headers[0]["authorization"] == "Bearer test-key"


def test_history_is_sent_on_the_next_turn(stub: OpenAIStub, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("first question"))
    client.post(f"/session/{sid}/message", json=text_prompt("second question", model=MODEL))
    second = _chat_requests(stub)[-1]
    assert [(m["role"], m["content"]) for m in second["messages"][1:]] == [
        ("user", "first question"),
        ("assistant", "Hello from stub"),
        ("user", "second question"),
    ]


def test_title_comes_from_the_model(stub: OpenAIStub, client: httpx.Client, server) -> None:
    stub.reply = lambda body: (
        StubReply(content=["Greeting", " chat"]) if "title generator" in body["messages"][0]["content"] else StubReply()
    )
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("hello"))
    wait_until(lambda: client.get(f"/session/{sid}").json()["title"] == "Greeting chat")


def test_server_errors_are_retried_then_answered(stub: OpenAIStub, client: httpx.Client) -> None:
    calls = {"n": 0}

    def flaky(body: dict) -> StubReply:
        if "title generator" in body["messages"][0]["content"]:
            return StubReply(content=["t"])
        calls["n"] += 1
        if calls["n"] == 1:
            return StubReply(status=503, body='{"error": {"message": "overloaded"}}', headers={"retry-after-ms": "5"})
        return StubReply(content=["recovered"])

    stub.reply = flaky
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("please")).json()
    assert "error" not in reply["info"]
    assert assistant_text(reply) == "recovered"
    assert calls["n"] == 2


@pytest.mark.parametrize(
    ("status", "name"),
    [(401, "ProviderAuthError"), (400, "APIError")],
)
def test_client_errors_are_not_retried(stub: OpenAIStub, client: httpx.Client, status: int, name: str) -> None:
    stub.reply = lambda _body: StubReply(status=status, body='{"error": {"message": "nope"}}')
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("x")).json()
    assert reply["info"]["error"]["name"] == name
    assert reply["info"]["error"]["data"]["message"] == "nope"
    assert len(_chat_requests(stub)) == 1


def test_context_overflow_is_reported_by_name(stub: OpenAIStub, client: httpx.Client) -> None:
    stub.reply = lambda _body: StubReply(status=400, body='{"error": {"message": "maximum context length exceeded"}}')
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("x")).json()
    assert reply["info"]["error"]["name"] == "ContextOverflowError"


def test_config_lists_the_provider(stub: OpenAIStub, client: httpx.Client) -> None:
    providers = client.get("/config/providers").json()
    stub_provider = next(p for p in providers["providers"] if p["id"] == "stub")
    assert "stub-model" in stub_provider["models"]
    assert providers["default"]["stub"] == "stub-model"
    assert client.get("/config").json()["model"] == "stub/stub-model"


def test_connection_is_reused_across_turns(project_dir: Path, client: httpx.Client) -> None:
    with openai_stub(keep_alive=True) as stub:
        _write_config(project_dir, stub.url)
        sid = create_session(client)["id"]
        client.post(f"/session/{sid}/message", json=text_prompt("first"))
        deadline = time.monotonic() + 10
        while client.get(f"/session/{sid}").json()["title"] != "Hello from stub" and time.monotonic() < deadline:
            time.sleep(0.02)  # the title request is made in the background
        opened = stub.connections
        for turn in range(2):
            reply = client.post(f"/session/{sid}/message", json=text_prompt(f"turn {turn}")).json()
            assert assistant_text(reply) == "Hello from stub"
        assert len(_chat_requests(stub)) == 3 and stub.connections == opened


async def test_transport_failures_are_retryable_provider_errors() -> None:
    """Over aiohttp's pool (app/providers/http.py) a refused connection and a stream cut short
    still reach the turn as retryable ProviderErrors, and a healthy answer after a cut comes over
    a fresh connection."""
    from app.providers.base import ChatRequest, ModelInfo, ProviderError, TextDelta
    from app.providers.connection import Connection
    from app.providers.openai_compat import OpenAICompatibleProvider
    from tests.servers import free_port
    from tests.stubs import Answer, sse_stub

    request = ChatRequest(ModelInfo("stub", "m", "m"), [], [{"role": "user", "content": "hi"}])

    async def _stream_all(provider: OpenAICompatibleProvider, request: ChatRequest) -> list[object]:
        return [event async for event in provider.stream(request)]

    refused = OpenAICompatibleProvider(Connection("stub", "stub", f"http://127.0.0.1:{free_port()}/v1", None))
    try:
        with pytest.raises(ProviderError) as failure:
            await _stream_all(refused, request)
        assert failure.value.is_retryable and "Connection error" in str(failure.value)
    finally:
        await refused.aclose()

    def chunk(text: str) -> tuple[None, dict[str, object]]:
        return None, {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}

    with sse_stub("/v1") as stub:
        answers = iter([Answer([chunk("par"), chunk("tial")], cut=True), Answer([chunk("whole"), (None, "[DONE]")])])
        stub.answer = lambda _body: next(answers)
        provider = OpenAICompatibleProvider(Connection("stub", "stub", stub.url, None))
        try:
            with pytest.raises(ProviderError) as cut:
                await _stream_all(provider, request)
            assert cut.value.is_retryable, cut.value
            events = await _stream_all(provider, request)
            assert [e.text for e in events if isinstance(e, TextDelta)] == ["whole"]
        finally:
            await provider.aclose()


def test_a_turn_leaves_no_reference_cycles_for_the_garbage_collector(stub: OpenAIStub, client: httpx.Client) -> None:
    """A turn's write transactions and its provider response are freed as soon as they are done
    (reference counting), not left in cycles for the collector, whose collections cost the loop
    noticeable CPU under load. The collector is off meanwhile, so a cycle would still be there."""
    stub.reply = lambda _body: StubReply(content=["Hel", "lo"])
    sid = create_session(client)["id"]
    gc.collect()
    gc.disable()
    try:
        for text in ("first", "second"):
            client.post(f"/session/{sid}/message", json=text_prompt(text))
        wait_until(lambda: len(stub.requests) >= 3 and not client.get("/session/status").json())  # and the title
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    ours = [type(o).__name__ for o in garbage if isinstance(o, Transaction | WriteScope)]
    provider = [o for o in garbage if isinstance(o, httpx.Response) and o.request.url.port == httpx.URL(stub.url).port]
    assert not ours and not provider, f"{len(ours)} transactions and {len(provider)} responses in cycles"
