"""Which model a job gets and how a wrong choice is answered, as OpenCode does: the small model
for session titles, ``ProviderModelNotFoundError`` with suggestions for an unknown model, a
``ProviderAuthError`` naming the key variable of a hosted provider without a key, and providers
connected by a key saved with ``PUT /auth/:id``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.providers import catalog
from tests.helpers import create_session, text_prompt
from tests.servers import OpenAIStub, ThreadServer, openai_stub
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SECRET = "sk-fake-selection-test-41c7d2"
HOSTED_KEYS = ("OPENROUTER_API_KEY", "GROQ_API_KEY", "DEEPSEEK_API_KEY")


@pytest.fixture(autouse=True)
def _no_hosted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own keys must not connect providers behind the tests' back."""
    for name in HOSTED_KEYS:
        monkeypatch.delenv(name, raising=False)


def _write_config(directory: Path, **config: Any) -> None:
    (directory / "opencode.json").write_text(json.dumps(config))


def _stub_provider(url: str, *models: str) -> dict[str, Any]:
    return {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": url, "apiKey": "test-key"},
        "models": {m: {} for m in models},
    }


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        yield handle


def _title_models(stub: OpenAIStub) -> list[str]:
    return [r["model"] for r in stub.requests if "title generator" in r["messages"][0]["content"]]


def _turn_models(stub: OpenAIStub) -> list[str]:
    return [r["model"] for r in stub.requests if "title generator" not in r["messages"][0]["content"]]


def _prompt(client: httpx.Client, sid: str, provider: str, model: str) -> httpx.Response:
    body = text_prompt("name this session", model={"providerID": provider, "modelID": model})
    return client.post(f"/session/{sid}/message", json=body)


def _wait_title(client: httpx.Client, sid: str) -> str:
    for _ in range(200):
        title = str(client.get(f"/session/{sid}").json()["title"])
        if not title.startswith("New session"):
            return title
        time.sleep(0.02)
    raise AssertionError("the title was never generated")


# -- small model -------------------------------------------------------------------------------


def test_configured_small_model_writes_the_title(stub: OpenAIStub, client: httpx.Client, project_dir: Path) -> None:
    _write_config(project_dir, small_model="stub/tiny", provider={"stub": _stub_provider(stub.url, "big", "tiny")})
    sid = create_session(client)["id"]
    assert _prompt(client, sid, "stub", "big").status_code == 200
    _wait_title(client, sid)
    assert _turn_models(stub) == ["big"]
    assert _title_models(stub) == ["tiny"]


def test_title_agent_model_outranks_the_small_model(stub: OpenAIStub, client: httpx.Client, project_dir: Path) -> None:
    provider = {"stub": _stub_provider(stub.url, "big", "tiny", "titler")}
    _write_config(project_dir, small_model="stub/tiny", agent={"title": {"model": "stub/titler"}}, provider=provider)
    sid = create_session(client)["id"]
    assert _prompt(client, sid, "stub", "big").status_code == 200
    _wait_title(client, sid)
    assert _title_models(stub) == ["titler"]


def _newest(provider_id: str, family: str) -> str:
    """The installed catalog's newest listed model of ``family`` (the catalog changes with it)."""
    models = catalog.providers()[provider_id]["models"].values()
    listed = [m for m in models if m.get("family") == family and m.get("status") not in ("deprecated", "alpha")]
    return max(listed, key=lambda m: (m.get("release_date", ""), m["id"]))["id"]


def test_provider_small_family_is_picked_newest_first(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    """No small_model: the main model's provider's newest model of the first small family it has
    (OpenCode: gemini-flash, then gpt-nano, then claude-haiku)."""
    openrouter = {"options": {"baseURL": stub.url, "apiKey": "test-key"}}
    _write_config(project_dir, provider={"openrouter": openrouter})
    sid = create_session(client)["id"]
    assert _prompt(client, sid, "openrouter", "openai/gpt-4.1").status_code == 200
    _wait_title(client, sid)
    assert _turn_models(stub) == ["openai/gpt-4.1"]
    assert _title_models(stub) == [_newest("openrouter", "gemini-flash")]


def test_without_a_small_model_the_main_model_titles(stub: OpenAIStub, client: httpx.Client, project_dir: Path) -> None:
    """A provider with no small family, or a small_model that does not exist: the main model."""
    _write_config(project_dir, small_model="stub/missing", provider={"stub": _stub_provider(stub.url, "big")})
    sid = create_session(client)["id"]
    assert _prompt(client, sid, "stub", "big").status_code == 200
    _wait_title(client, sid)
    assert _title_models(stub) == ["big"]


# -- unknown models ----------------------------------------------------------------------------


def _not_found(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["name"] == "ProviderModelNotFoundError"
    assert set(body["data"]) == {"providerID", "modelID", "suggestions"}
    return dict(body["data"])


def test_unknown_model_suggests_the_providers_models(
    stub: OpenAIStub, client: httpx.Client, server: ThreadServer, project_dir: Path
) -> None:
    _write_config(project_dir, provider={"stub": _stub_provider(stub.url, "stub-model", "other")})
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        body = text_prompt("x", model={"providerID": "stub", "modelID": "stub-modl"})
        data = _not_found(client.post(f"/session/{sid}/prompt_async", json=body))
        assert data == {"providerID": "stub", "modelID": "stub-modl", "suggestions": ["stub-model"]}
        error = events.wait_for(lambda f: f.type == "session.error").properties
    message = "Model not found: stub/stub-modl. Did you mean: stub-model?"
    assert error == {"sessionID": sid, "error": {"name": "UnknownError", "data": {"message": message}}}
    assert client.get(f"/session/{sid}/message").json() == []
    assert stub.requests == []


def test_unknown_provider_suggests_provider_ids(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    data = _not_found(_prompt(client, sid, "opnrouter", "gpt-4o"))
    assert data["providerID"] == "opnrouter" and data["suggestions"][0] == "openrouter"
    data = _not_found(_prompt(client, sid, "zzz", "zzz"))
    assert data["suggestions"] == []


def test_unconnected_catalog_provider_suggests_its_catalog_models(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    data = _not_found(_prompt(client, sid, "deepseek", "deepseek-cht"))
    assert data["suggestions"] == ["deepseek-chat"]
    # No fuzzy match (no id holds every character of the request in order): the ids sharing the
    # most words of the request.
    data = _not_found(_prompt(client, sid, "deepseek", "chat-v9"))
    assert data["suggestions"] == ["deepseek-chat"]


def test_v2_model_choice_and_commands_refuse_unknown_models(client: httpx.Client) -> None:
    """V2 chooses a prompt's model with ``/model`` (its 400 is an InvalidRequestError)."""
    sid = client.post("/api/session", json={}).json()["data"]["id"]
    body = {"model": {"providerID": "deepseek", "id": "deepseek-cht"}}
    response = client.post(f"/api/session/{sid}/model", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["_tag"] == "InvalidRequestError"
    assert response.json()["message"] == "Model not found: deepseek/deepseek-cht. Did you mean: deepseek-chat?"

    legacy = create_session(client)["id"]
    command = {"command": "init", "arguments": "", "model": "deepseek/deepseek-cht"}
    data = _not_found(client.post(f"/session/{legacy}/command", json=command))
    assert data["suggestions"] == ["deepseek-chat"]


# -- missing keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "variable"),
    [("openrouter", "openai/gpt-4.1", "OPENROUTER_API_KEY"), ("groq", "llama-3.1-8b-instant", "GROQ_API_KEY")],
)
def test_hosted_provider_without_a_key_fails_naming_its_variable(
    client: httpx.Client, project_dir: Path, provider: str, model: str, variable: str
) -> None:
    """A catalog provider connected by its opencode.json block with no key anywhere: the turn
    fails before any request with OpenCode's ProviderAuthError naming the key variable."""
    _write_config(project_dir, provider={provider: {}})
    sid = create_session(client)["id"]
    reply = _prompt(client, sid, provider, model)
    assert reply.status_code == 200, reply.text
    error = reply.json()["info"]["error"]
    assert error["name"] == "ProviderAuthError"
    assert set(error["data"]) == {"providerID", "message"}
    assert error["data"]["providerID"] == provider
    assert variable in error["data"]["message"]


# -- stored keys connect providers -------------------------------------------------------------


def _sources(client: httpx.Client) -> dict[str, str]:
    return {p["id"]: p["source"] for p in client.get("/config/providers").json()["providers"]}


def test_stored_key_connects_a_catalog_provider(
    client: httpx.Client, server: ThreadServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Listed as connected (source ``api``) with its catalog models, by every provider route,
    until the key is deleted; the key itself is in no answer, event or log line."""
    caplog.set_level(logging.DEBUG)
    assert "groq" not in client.get("/provider").json()["connected"]
    bodies: list[str] = []
    with EventCollector(f"{server.url}/event") as events:
        assert client.put("/auth/groq", json={"type": "api", "key": SECRET}).json() is True
        assert client.post("/instance/dispose").json() is True  # as the TUI does after /connect
        listed = client.get("/provider")
        assert "groq" in listed.json()["connected"]
        assert next(p for p in listed.json()["all"] if p["id"] == "groq")["source"] == "api"
        assert _sources(client)["groq"] == "api"
        v2_providers = client.get("/api/provider")
        v2_models = client.get("/api/model")
        assert "groq" in {p["id"] for p in v2_providers.json()["data"]}
        configured = client.get("/config/providers")
        groq = next(p for p in configured.json()["providers"] if p["id"] == "groq")
        assert groq["models"]  # its catalog models, for the TUI's model picker
        assert {m["id"] for m in v2_models.json()["data"] if m["providerID"] == "groq"} == set(groq["models"])
        bodies += [listed.text, v2_providers.text, v2_models.text, configured.text]
        bodies += [client.get(path).text for path in ("/config", "/provider/auth", "/doc")]
        assert client.delete("/auth/groq").json() is True
        assert "groq" not in client.get("/provider").json()["connected"]
        assert "groq" not in _sources(client)
        frames = events.snapshot()
    for text in bodies + [json.dumps(f.data) for f in frames] + [r.getMessage() for r in caplog.records]:
        assert SECRET not in text


def test_stored_key_reaches_a_catalog_provider_on_the_next_turn(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    """deepseek pointed at a local stub (no key needed there): the key saved after start-up is
    sent from the next turn on, with or without an instance dispose in between."""
    _write_config(project_dir, provider={"deepseek": {"options": {"baseURL": stub.url}}})
    sid = create_session(client)["id"]
    assert _prompt(client, sid, "deepseek", "deepseek-chat").status_code == 200
    assert client.put("/auth/deepseek", json={"type": "api", "key": SECRET}).json() is True
    assert _prompt(client, sid, "deepseek", "deepseek-chat").status_code == 200
    assert client.post("/instance/dispose").json() is True
    assert _prompt(client, sid, "deepseek", "deepseek-chat").status_code == 200
    sent = [h.get("authorization") for h in stub.chat_headers()]
    assert sent == [None, f"Bearer {SECRET}", f"Bearer {SECRET}"]


def test_what_the_first_turn_loads_is_loaded_ahead_on_a_thread(
    server: ThreadServer, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After start-up a server loads, on a thread, what the first requests would load on the
    event loop: the model catalog always (the TUI lists providers at once), then the client
    and SDK of the default model's API (Anthropic's SDK for a model of any provider whose
    package is Anthropic's), the OpenAI-compatible client and its CA bundle for the rest."""
    from app.providers import catalog, http
    from app.providers import registry as registry_module

    registry = server.runtime.registry
    directory = str(project_dir)
    catalog.providers.cache_clear()
    registry.first_use(directory)()
    assert catalog.providers.cache_info().currsize == 1  # the catalog read, for the built-in model too
    loaded: list[tuple[str, ...]] = []
    monkeypatch.setattr(registry_module, "load_modules", loaded.append)
    registry.first_use(directory)()
    _write_config(project_dir, model="minimax/MiniMax-M2")  # the catalog names Anthropic's package
    registry.first_use(directory)()
    _write_config(project_dir, model="openai/gpt-5.1")
    registry.first_use(directory)()
    assert loaded == [("app.providers.anthropic", "anthropic"), ("app.providers.openai_responses", "openai")]
    monkeypatch.undo()
    _write_config(project_dir, model="stub/m", provider={"stub": _stub_provider("http://127.0.0.1:9/v1", "m")})
    http.tls_context.cache_clear()
    registry.first_use(directory)()
    assert http.tls_context.cache_info().currsize == 1  # the CA bundle is loaded
