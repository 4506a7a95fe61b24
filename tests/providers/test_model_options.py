"""Model options, variants and agent settings from opencode.json reach the model call: through the
real server against local stubs of the OpenAI chat API and Anthropic's Messages API, asserting on
the request bodies and headers the stubs received and on what clients see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.anthropic_stub import Answer, Stub, anthropic_stub, message, text, thinking, title_or
from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import OpenAIStub, StubReply, openai_stub

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

MODEL = "qwen-stub"  # a qwen model: OpenCode's default temperature for it is 0.55
CLAUDE = "claude-stub-1"


def _local(url: str, **model: Any) -> dict[str, Any]:
    """An openai-compatible provider block whose model has options, headers and variants."""
    spec = {
        "reasoning": True,
        "temperature": True,
        "limit": {"context": 100_000, "output": 50_000},
        "options": {"reasoningEffort": "low", "seed": 7},
        "headers": {"X-Model": "from-model"},
        "variants": {
            "high": {"chat_template_kwargs": {"depth": 3}},
            "low": {"disabled": True},
            "fast": {"reasoningEffort": "minimal"},
        },
    }
    options = {"baseURL": url, "apiKey": "k", "headers": {"X-Provider": "from-provider"}, "setCacheKey": True}
    return {"npm": "@ai-sdk/openai-compatible", "options": options, "models": {MODEL: spec | model}}


def _write(directory: Path, config: dict[str, Any]) -> None:
    (directory / "opencode.json").write_text(json.dumps(config))


AGENTS = {"careful": {"temperature": 0.1, "top_p": 0.5, "options": {"textVerbosity": "low"}, "seed": 9}}


@pytest.fixture
def stub(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        _write(project_dir, {"model": f"local/{MODEL}", "provider": {"local": _local(handle.url)}, "agent": AGENTS})
        yield handle


def _turns(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r for r in stub.requests if "title generator" not in r["messages"][0]["content"]]


def test_model_options_and_chosen_variant_reach_the_body(stub: OpenAIStub, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    plain = client.post(f"/session/{sid}/message", json=text_prompt("hi")).json()
    assert "variant" not in plain["info"]
    body = _turns(stub)[0]
    assert body["reasoning_effort"] == "low" and body["seed"] == 7  # the model's options
    assert body["promptCacheKey"] == sid  # setCacheKey: OpenCode's default, passed through as is
    assert (body["temperature"], body["top_p"]) == (0.55, 1.0)  # OpenCode's qwen defaults
    assert body["max_tokens"] == 32_000  # the model's 50k output, at most 32k
    assert "chat_template_kwargs" not in body
    headers = stub.headers[stub.requests.index(body)]
    assert headers["x-provider"] == "from-provider" and headers["x-model"] == "from-model"

    chosen = client.post(f"/session/{sid}/message", json=text_prompt("think hard", variant="high")).json()
    assert chosen["info"]["variant"] == "high"
    body = _turns(stub)[1]
    # The generated "high" (reasoningEffort) merged with the configured one, over the model's options.
    assert body["reasoning_effort"] == "high" and body["chat_template_kwargs"] == {"depth": 3}
    assert body["seed"] == 7
    messages = client.get(f"/session/{sid}/message").json()
    user = next(
        m["info"] for m in messages if m["info"]["role"] == "user" and m["info"]["id"] == chosen["info"]["parentID"]
    )
    assert user["model"] == {"providerID": "local", "modelID": MODEL, "variant": "high"}
    assert client.get(f"/session/{sid}").json()["model"]["variant"] == "high"


@pytest.mark.parametrize("limit, expected", [({"context": 8_000, "output": 2_000}, 2_000), (None, 32_000)])
def test_max_tokens_is_the_model_limit_or_opencodes_default(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path, limit: dict[str, int] | None, expected: int
) -> None:
    _write(project_dir, {"model": f"local/{MODEL}", "provider": {"local": _local(stub.url, limit=limit)}})
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert _turns(stub)[0]["max_tokens"] == expected


def test_agent_settings_override_the_model(stub: OpenAIStub, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi", agent="careful", variant="fast")).json()
    assert assistant_text(reply) == "Hello from stub"
    body = _turns(stub)[0]
    assert (body["temperature"], body["top_p"]) == (0.1, 0.5)
    assert body["verbosity"] == "low" and body["seed"] == 9  # options, and an unknown agent key is one
    assert body["reasoning_effort"] == "minimal"  # the variant comes last
    agent = next(a for a in client.get("/agent").json() if a["name"] == "careful")
    assert agent["temperature"] == 0.1 and agent["topP"] == 0.5
    assert agent["options"] == {"textVerbosity": "low", "seed": 9}


def test_variant_from_a_command_a_v2_session_and_the_agent(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    agents = AGENTS | {"deep": {"model": f"local/{MODEL}", "variant": "high"}}
    commands = {"ask": {"template": "Answer $ARGUMENTS"}}
    config = {"model": f"local/{MODEL}", "provider": {"local": _local(stub.url)}, "agent": agents, "command": commands}
    _write(project_dir, config)
    sid = create_session(client)["id"]
    command = {"command": "ask", "arguments": "this", "variant": "fast"}
    reply = client.post(f"/session/{sid}/command", json=command).json()
    assert reply["info"]["variant"] == "fast" and _turns(stub)[-1]["reasoning_effort"] == "minimal"
    client.post(f"/session/{sid}/message", json=text_prompt("hi", agent="deep"))  # the agent's own variant
    assert _turns(stub)[-1]["chat_template_kwargs"] == {"depth": 3}

    v2 = client.post("/api/session", json={}).json()["data"]["id"]
    switched = {"model": {"id": MODEL, "providerID": "local", "variant": "fast"}}
    assert client.post(f"/api/session/{v2}/model", json=switched).status_code == 204
    assert client.post(f"/api/session/{v2}/prompt", json={"prompt": {"text": "hi"}}).status_code == 200
    assert client.post(f"/api/session/{v2}/wait").status_code == 204
    assert _turns(stub)[-1]["reasoning_effort"] == "minimal"


def test_variants_are_listed(stub: OpenAIStub, client: httpx.Client) -> None:
    expected = {
        "medium": {"reasoningEffort": "medium"},
        "high": {"reasoningEffort": "high", "chat_template_kwargs": {"depth": 3}},
        "fast": {"reasoningEffort": "minimal"},
    }
    listing = client.get("/config/providers").json()["providers"]
    model = next(p for p in listing if p["id"] == "local")["models"][MODEL]
    assert model["variants"] == expected
    assert model["options"] == {"reasoningEffort": "low", "seed": 7}
    assert model["headers"] == {"X-Model": "from-model"}
    everything = client.get("/provider").json()["all"]
    assert next(p for p in everything if p["id"] == "local")["models"][MODEL]["variants"] == expected
    v2 = next(m for m in client.get("/api/model").json()["data"] if m["id"] == MODEL)
    assert [v["id"] for v in v2["variants"]] == list(expected)
    anthropic = next(p for p in everything if p["id"] == "anthropic")["models"]["claude-sonnet-4-20250514"]
    assert anthropic["variants"]["high"] == {"thinking": {"type": "enabled", "budgetTokens": 16_000}}


@pytest.mark.parametrize(
    "model, agent, key",
    [
        ({"options": "high"}, {}, f"provider.local.models.{MODEL}.options"),
        ({"variants": {"high": 3}}, {}, f"provider.local.models.{MODEL}.variants.high"),
        ({"variants": {"high": {"disabled": "yes"}}}, {}, "variants.high.disabled"),
        ({}, {"build": {"temperature": "hot"}}, "agent.build.temperature"),
        ({}, {"build": {"options": ["x"]}}, "agent.build.options"),
    ],
)
def test_malformed_setting_is_a_clear_error_and_the_server_keeps_serving(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path, model: dict[str, Any], agent: dict[str, Any], key: str
) -> None:
    _write(project_dir, {"model": f"local/{MODEL}", "provider": {"local": _local(stub.url, **model)}, "agent": agent})
    sid = create_session(client)["id"]
    answer = client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert answer.status_code == 400, answer.text
    assert answer.json()["name"] == "ConfigInvalidError" and key in answer.json()["data"]["message"]
    assert _turns(stub) == []
    assert client.get("/global/health").json()["healthy"] is True
    _write(project_dir, {"model": f"local/{MODEL}", "provider": {"local": _local(stub.url)}})
    assert assistant_text(client.post(f"/session/{sid}/message", json=text_prompt("again")).json())


def test_malformed_provider_options_name_the_provider(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    block = _local(stub.url)
    block["options"]["headers"] = {"X-Count": 3}
    _write(project_dir, {"model": f"local/{MODEL}", "provider": {"local": block}})
    sid = create_session(client)["id"]
    answer = client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert answer.status_code == 400 and "provider.local.options.headers" in answer.json()["data"]["message"]
    assert client.get("/config/providers").status_code == 400


def test_setting_broken_after_admission_fails_the_turn_with_a_named_error(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    stub.reply = lambda _body: StubReply(delay=0.2)
    sid = create_session(client)["id"]
    assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("first")).status_code == 204
    assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("second")).status_code == 204
    broken = {"model": f"local/{MODEL}", "provider": {"local": _local(stub.url)}, "agent": {"build": {"top_p": "x"}}}
    _write(project_dir, broken)
    assert client.post(f"/api/session/{sid}/wait").status_code == 204
    last = client.get(f"/session/{sid}/message").json()[-1]["info"]
    assert last["role"] == "assistant" and last["error"]["name"] == "UnknownError"
    assert "agent.build.top_p" in last["error"]["data"]["message"]
    assert client.get("/global/health").json()["healthy"] is True


# --- Anthropic ---


@pytest.fixture
def claude(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    spec = {"reasoning": True, "temperature": True, "limit": {"context": 200_000, "output": 32_000}}
    config = {
        "model": f"anthropic/{CLAUDE}",
        "provider": {"anthropic": {"models": {CLAUDE: spec | {"headers": {"X-Model": "m"}}}}},
        "agent": {"build": {"temperature": 0.2}},
    }
    with anthropic_stub(monkeypatch) as handle:
        _write(project_dir, config)
        handle.answer = title_or(lambda _body: Answer(message(thinking(0, "Weighing ", "it."), text(1, "Done."))))
        yield handle


def test_anthropic_thinking_budget_and_max_tokens(claude: Stub, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("think", variant="high")).json()
    assert [p["type"] for p in reply["parts"]] == ["step-start", "reasoning", "text", "step-finish"]
    assert reply["parts"][1]["text"] == "Weighing it." and assistant_text(reply) == "Done."
    body = claude.chat()[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16_000}
    # 16k thinking plus 32k text would pass the model's 32k cap: text gets 16k, max_tokens the sum.
    assert body["max_tokens"] == 32_000 and body["max_tokens"] > body["thinking"]["budget_tokens"]
    assert "temperature" not in body and "top_p" not in body  # refused with thinking on
    headers = claude.headers[claude.requests.index(body)]
    assert headers["x-model"] == "m" and "anthropic-beta" not in headers  # OpenCode 1.18.33 sends no beta


def test_anthropic_without_thinking_takes_the_agent_temperature(
    claude: Stub, client: httpx.Client, project_dir: Path
) -> None:
    config = json.loads((project_dir / "opencode.json").read_text())
    config["provider"]["anthropic"]["options"] = {"headers": {"anthropic-beta": "custom-beta"}}
    _write(project_dir, config)
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    body = claude.chat()[0]
    assert "thinking" not in body and body["temperature"] == 0.2 and body["max_tokens"] == 32_000
    assert claude.headers[claude.requests.index(body)]["anthropic-beta"] == "custom-beta"
