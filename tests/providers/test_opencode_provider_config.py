"""An opencode.json as OpenCode users write it (today's model ids, a ``baseURL`` gateway that ends
in ``/v1``, headers, ``{env:...}`` and ``{file:...}``) reaches the same URLs with the same
headers as OpenCode's AI SDK providers do, on local stubs speaking each API's streaming format."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.providers import catalog
from tests.anthropic_stub import message, text, thinking, tool_use
from tests.helpers import create_session, text_prompt
from tests.providers.test_openai_responses import Events
from tests.sse import EventCollector
from tests.stubs import Answer, Stub, sse_stub

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # no storage here

SONNET = "claude-sonnet-4-5"
GATEWAY_KEY = "sk-gateway-5e1d"


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    """A stub gateway; no provider key or URL in the environment but the one the config names."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_KEY", GATEWAY_KEY)
    with sse_stub() as stub:
        yield stub


def _write(project_dir: Path, config: dict[str, Any]) -> None:
    (project_dir / "opencode.json").write_text(json.dumps({"$schema": "https://opencode.ai/config.json", **config}))


def _anthropic_config(project_dir: Path, base_url: str, provider_id: str = "anthropic", model: str = SONNET) -> None:
    (project_dir / "team.txt").write_text('platform "core"\n')  # a quote: the value must stay JSON
    options = {
        "baseURL": base_url,
        "apiKey": "{env:GATEWAY_KEY}",
        "headers": {"X-Team": "{file:team.txt}"},
        "timeout": 600_000,
    }
    _write(project_dir, {"model": f"{provider_id}/{model}", "provider": {provider_id: {"options": options}}})


def _turns(stub: Stub) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """(path, headers, body) of the turns' requests (not the title's)."""
    with stub.recording:
        rows = list(zip(stub.paths, stub.headers, stub.requests, strict=True))
    return [(p, h, b) for p, h, b in rows if "title generator" not in json.dumps(b)]


def _prompt(client: httpx.Client, body: dict[str, Any] | None = None) -> dict[str, Any]:
    sid = create_session(client)["id"]
    reply: dict[str, Any] = client.post(f"/session/{sid}/message", json=body or text_prompt("hi")).json()
    return reply


def test_an_anthropic_gateway_url_ending_in_v1_gets_messages_appended(
    gateway: Stub, client: httpx.Client, project_dir: Path
) -> None:
    gateway.answer = lambda _body: Answer(message(thinking(0, "let me see"), text(1, "Hello")))
    _anthropic_config(project_dir, f"{gateway.url}/v1")
    reply = _prompt(client, {**text_prompt("hi"), "variant": "high"})
    assert "error" not in reply["info"], reply["info"]
    path, headers, body = _turns(gateway)[0]
    assert path == "/v1/messages"  # OpenCode's URL + /messages, not the SDK's /v1/v1/messages
    assert headers["x-api-key"] == GATEWAY_KEY and headers["x-team"] == 'platform "core"'
    # As OpenCode 1.18.33 sends them to such a gateway (captured): the session, no beta.
    assert headers["x-session-affinity"] == headers["x-session-id"] == reply["info"]["sessionID"]
    assert "anthropic-beta" not in headers
    assert body["model"] == SONNET and body["thinking"] == {"type": "enabled", "budget_tokens": 16_000}
    kinds = [p["type"] for p in reply["parts"]]
    assert "reasoning" in kinds and kinds[-1] == "step-finish"
    # Tokens as the stub reports them, priced with the catalog's prices for this model.
    price = catalog.model("anthropic", SONNET)["cost"]  # type: ignore[index]
    tokens = reply["parts"][-1]["tokens"]
    assert (tokens["input"], tokens["output"], tokens["cache"]) == (21, 9, {"read": 5, "write": 7})
    expected = (21 * price["input"] + 9 * price["output"] + 5 * price["cache_read"] + 7 * price["cache_write"]) / 1e6
    assert reply["info"]["cost"] == pytest.approx(expected) and expected > 0


def test_an_anthropic_url_without_v1_is_reached_as_opencode_reaches_it(
    gateway: Stub, client: httpx.Client, project_dir: Path
) -> None:
    gateway.answer = lambda _body: Answer(message(text(0, "Hi")))
    _anthropic_config(project_dir, f"{gateway.url}/gateway/anthropic")
    assert "error" not in _prompt(client)["info"]
    assert _turns(gateway)[0][0] == "/gateway/anthropic/messages"


def test_tool_calls_through_the_gateway(gateway: Stub, client: httpx.Client, project_dir: Path) -> None:
    (project_dir / "notes.txt").write_text("gateway notes\n")
    answers = iter(
        [
            Answer(message(tool_use(0, "toolu_1", "read", json.dumps({"filePath": "notes.txt"})), stop="tool_use")),
            Answer(message(text(0, "done"))),
        ]
    )
    gateway.answer = lambda body: (
        Answer(message(text(0, "T"))) if "title generator" in json.dumps(body) else next(answers)
    )
    _anthropic_config(project_dir, f"{gateway.url}/v1")
    reply = _prompt(client)
    assert "error" not in reply["info"], reply["info"]
    turns = _turns(gateway)
    assert [t[0] for t in turns] == ["/v1/messages", "/v1/messages"]
    result = turns[1][2]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and "gateway notes" in json.dumps(result)


def test_a_catalog_provider_on_anthropics_api_is_called_as_anthropic(
    gateway: Stub, client: httpx.Client, project_dir: Path
) -> None:
    """MiniMax's catalog entry names Anthropic's package and an API URL ending in /v1."""
    model = next(iter(catalog.providers()["minimax"]["models"]))
    gateway.answer = lambda _body: Answer(message(text(0, "Hi")))
    _anthropic_config(project_dir, f"{gateway.url}/anthropic/v1", provider_id="minimax", model=model)
    assert "error" not in _prompt(client)["info"]
    path, headers, body = _turns(gateway)[0]
    assert path == "/anthropic/v1/messages" and headers["x-api-key"] == GATEWAY_KEY and body["model"] == model


def test_an_openai_gateway_gets_responses_appended(gateway: Stub, client: httpx.Client, project_dir: Path) -> None:
    gateway.answer = lambda _body: Answer(Events().text("Hello").done())
    options = {"baseURL": f"{gateway.url}/v1", "apiKey": "{env:GATEWAY_KEY}", "headers": {"X-Team": "core"}}
    _write(project_dir, {"model": "openai/gpt-5.1", "provider": {"openai": {"options": options}}})
    reply = _prompt(client)
    assert "error" not in reply["info"], reply["info"]
    path, headers, body = _turns(gateway)[0]
    assert path == "/v1/responses" and body["model"] == "gpt-5.1"
    assert headers["authorization"] == f"Bearer {GATEWAY_KEY}" and headers["x-team"] == "core"
    assert headers["originator"] == "opencode" and headers["session-id"] == reply["info"]["sessionID"]


def test_todays_models_are_listed_with_limits_and_prices(client: httpx.Client, project_dir: Path) -> None:
    _write(project_dir, {"provider": {"anthropic": {"options": {"apiKey": "k"}}}})
    providers = {p["id"]: p for p in client.get("/config/providers").json()["providers"]}
    for model_id in ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"):
        listed = providers["anthropic"]["models"][model_id]
        known = catalog.model("anthropic", model_id)
        assert known is not None
        assert listed["limit"]["context"] == known["limit"]["context"] > 0
        assert listed["cost"]["input"] == known["cost"]["input"] > 0
    everything = {p["id"] for p in client.get("/provider").json()["all"]}
    assert {"anthropic", "openai", "google", "groq", "deepseek", "minimax"} <= everything


def test_a_provider_by_name_without_its_key_names_the_variable(
    client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    model = next(iter(catalog.providers()["groq"]["models"]))
    _write(project_dir, {"model": f"groq/{model}"})
    error = _prompt(client)["info"]["error"]
    assert error["name"] == "ProviderAuthError" and "GROQ_API_KEY" in error["data"]["message"]


def test_a_provider_whose_api_is_not_spoken_fails_its_turn_clearly(client: httpx.Client, project_dir: Path) -> None:
    model = next(iter(catalog.providers()["amazon-bedrock"]["models"]))
    _write(project_dir, {"model": f"amazon-bedrock/{model}"})
    error = _prompt(client)["info"]["error"]
    assert error["name"] == "ProviderInitError" and "@ai-sdk/amazon-bedrock" in error["data"]["message"]


def test_a_missing_file_reference_is_a_clear_config_error(client: httpx.Client, project_dir: Path) -> None:
    _write(project_dir, {"provider": {"openai": {"options": {"apiKey": "{file:no-such-key.txt}"}}}})
    answer = client.get("/config")
    assert answer.status_code == 400, answer.text
    assert "no-such-key.txt" in answer.json()["data"]["message"]


def test_a_file_reference_on_a_comment_line_is_left_alone(client: httpx.Client, project_dir: Path) -> None:
    (project_dir / "opencode.jsonc").write_text(
        '{\n  // "apiKey": "{file:missing.txt}"\n  "username": "{env:HOME}"\n}\n'
    )
    answer = client.get("/config")
    assert answer.status_code == 200, answer.text
    assert answer.json()["username"] == os.environ["HOME"]


def test_overload_is_retried_after_its_retry_after_with_status_events(
    gateway: Stub, client: httpx.Client, project_dir: Path
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    answers = iter([Answer(status=529, body=overloaded, headers={"retry-after": "1"}), Answer(message(text(0, "ok")))])
    gateway.answer = lambda body: (
        Answer(message(text(0, "T"))) if "title generator" in json.dumps(body) else next(answers)
    )
    _anthropic_config(project_dir, f"{gateway.url}/v1")
    with EventCollector(f"{client.base_url}/event") as events:
        started = time.monotonic()
        reply = _prompt(client)
        waited = time.monotonic() - started
        assert "error" not in reply["info"], reply["info"]
        statuses = [
            f.properties["status"] for f in events.of_session(reply["info"]["sessionID"]) if f.type == "session.status"
        ]
    retry = next(s for s in statuses if s["type"] == "retry")
    assert retry["attempt"] == 1 and retry["message"] == "Provider is overloaded"  # OpenCode's words
    assert waited >= 1.0  # the server's retry-after, in seconds, was waited out
    assert [t[0] for t in _turns(gateway)] == ["/v1/messages", "/v1/messages"]


def test_an_image_reaches_the_gateway_as_an_image_block(gateway: Stub, client: httpx.Client, project_dir: Path) -> None:
    pixel = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    gateway.answer = lambda _body: Answer(message(text(0, "a pixel")))
    _anthropic_config(project_dir, f"{gateway.url}/v1")
    image = {"type": "file", "mime": "image/png", "url": f"data:image/png;base64,{pixel}", "filename": "p.png"}
    reply = _prompt(client, {"parts": [{"type": "text", "text": "what is it?"}, image]})
    assert "error" not in reply["info"], reply["info"]
    blocks = _turns(gateway)[0][2]["messages"][-1]["content"]
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}} in blocks


def test_google_by_name_goes_to_geminis_openai_compatible_endpoint(
    gateway: Stub, client: httpx.Client, project_dir: Path
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    gateway.answer = lambda _body: Answer([(None, chunk), (None, "[DONE]")])
    model = "gemini-2.5-flash"
    assert catalog.model("google", model) is not None
    options = {"baseURL": f"{gateway.url}/v1beta", "apiKey": "{env:GATEWAY_KEY}"}
    _write(project_dir, {"model": f"google/{model}", "provider": {"google": {"options": options}}})
    reply = _prompt(client)
    assert "error" not in reply["info"], reply["info"]
    path, headers, body = _turns(gateway)[0]
    assert path == "/v1beta/openai/chat/completions" and headers["authorization"] == f"Bearer {GATEWAY_KEY}"
    assert body["extra_body"] == {"google": {"thinking_config": {"include_thoughts": True}}}
    assert "thinkingConfig" not in body and body["model"] == model
