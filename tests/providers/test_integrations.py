"""V2 integrations (``/api/integration...``) and credentials (``/api/credential/{id}``): each catalog
provider with its connection methods and connections; a key connected here is the provider's
saved credential (the one ``PUT /auth`` saves) and is used by its next turn; credentials are
renamed and removed by id; every change is announced; the key is never shown."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.providers import catalog
from app.settings import Settings
from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import OpenAIStub, ThreadServer, openai_stub
from tests.sse import EventCollector, Frame

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SECRET = "sk-fake-integration-test-4d1e"


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own provider keys would show as environment connections."""
    for provider in catalog.providers().values():
        for name in provider.get("env") or []:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def deepseek(project_dir: Path) -> Iterator[OpenAIStub]:
    """The catalog's DeepSeek (OpenAI-compatible) answered by a local stub: its key is whatever
    credential it has."""
    with openai_stub() as handle:
        config = {"model": "deepseek/deepseek-chat", "provider": {"deepseek": {"options": {"baseURL": handle.url}}}}
        (project_dir / "opencode.json").write_text(json.dumps(config))
        yield handle


def _integration(client: httpx.Client, integration_id: str) -> Any:
    response = client.get(f"/api/integration/{integration_id}")
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_each_catalog_provider_is_listed_by_name_with_its_methods(
    client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "from-the-environment")
    body = client.get("/api/integration").json()
    assert body["location"]["directory"] == str(project_dir)
    listed = body["data"]
    assert {i["id"] for i in listed} == set(catalog.providers())
    names = [i["name"] for i in listed]
    assert names == sorted(names, key=str.casefold)
    anthropic = next(i for i in listed if i["id"] == "anthropic")
    assert anthropic == {
        "id": "anthropic",
        "name": "Anthropic",
        "methods": [{"type": "key"}, {"type": "env", "names": ["ANTHROPIC_API_KEY"]}],
        "connections": [],
    }
    assert next(i for i in listed if i["id"] == "groq")["connections"] == [{"type": "env", "name": "GROQ_API_KEY"}]
    assert _integration(client, "groq") == next(i for i in listed if i["id"] == "groq")
    assert _integration(client, "no-such-provider") is None  # OpenCode answers null too


def test_a_connected_key_is_the_providers_credential_and_its_next_turn_uses_it(
    deepseek: OpenAIStub, client: httpx.Client, settings: Settings
) -> None:
    response = client.post("/api/integration/deepseek/connect/key", json={"key": SECRET, "label": "work"})
    assert response.status_code == 204, response.text
    [connection] = _integration(client, "deepseek")["connections"]
    assert connection["type"] == "credential" and connection["label"] == "work"
    assert connection["id"].startswith("cred_")
    stored = json.loads((Path(settings.data_dir) / "auth.json").read_text())["deepseek"]
    assert stored == {"type": "api", "key": SECRET, "id": connection["id"], "label": "work"}
    assert "deepseek" in client.get("/provider").json()["connected"]

    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert reply.status_code == 200 and assistant_text(reply.json()) == "Hello from stub"
    assert {h.get("authorization") for h in deepseek.chat_headers()} == {f"Bearer {SECRET}"}

    # Connecting again replaces it (a provider has one credential), under a new id.
    assert client.post("/api/integration/deepseek/connect/key", json={"key": SECRET + "-2"}).status_code == 204
    [again] = _integration(client, "deepseek")["connections"]
    assert again["id"] != connection["id"] and again["label"] == "default"

    # A key saved with the legacy route is a connection too, addressable by its id.
    assert client.put("/auth/deepseek", json={"type": "api", "key": SECRET}).json() is True
    assert _integration(client, "deepseek")["connections"] == [
        {"type": "credential", "id": "cred_deepseek", "label": "default"}
    ]
    texts = [client.get("/api/integration").text, client.get("/api/integration/deepseek").text]
    assert all(SECRET not in text for text in texts)


def test_credentials_are_renamed_and_removed_by_id_and_every_change_is_announced(
    client: httpx.Client, server: ThreadServer, settings: Settings
) -> None:
    with EventCollector(f"{server.url}/event") as events, EventCollector(f"{server.url}/api/event") as v2_events:
        assert client.post("/api/integration/anthropic/connect/key", json={"key": SECRET}).status_code == 204
        credential = _integration(client, "anthropic")["connections"][0]["id"]
        assert client.patch(f"/api/credential/{credential}", json={"label": "renamed"}).status_code == 204
        assert _integration(client, "anthropic")["connections"][0]["label"] == "renamed"
        # An id no credential has: nothing changes, and that is no error (as in OpenCode).
        assert client.patch("/api/credential/cred_unknown", json={"label": "x"}).status_code == 204
        assert client.delete("/api/credential/cred_unknown").status_code == 204
        assert client.delete(f"/api/credential/{credential}").status_code == 204
        assert _integration(client, "anthropic")["connections"] == []
        assert json.loads((Path(settings.data_dir) / "auth.json").read_text()) == {}
        events.wait_for(nth("integration.updated", 5))
        v2_events.wait_for(nth("integration.updated", 5))
    changed = ("integration.connection.updated", {"integrationID": "anthropic"})
    updated: tuple[str, dict[str, Any]] = ("integration.updated", {})
    expected = [changed, updated, changed, updated, updated, updated, changed, updated]
    assert [(f.type, f.properties) for f in integration_frames(events)] == expected
    assert [(f.type, f.data["data"]) for f in integration_frames(v2_events)] == expected
    assert all(f.data["location"]["directory"] == settings.directory for f in integration_frames(v2_events))
    assert all(SECRET not in json.dumps(f.data) for f in events.snapshot() + v2_events.snapshot())


def nth(event_type: str, n: int) -> Callable[[Frame], bool]:
    """A ``wait_for`` predicate true at the ``n``th frame of ``event_type``."""
    seen = 0

    def counted(frame: Frame) -> bool:
        nonlocal seen
        seen += frame.type == event_type
        return seen == n

    return counted


def integration_frames(events: EventCollector) -> list[Any]:
    return [f for f in events.snapshot() if f.type.startswith("integration.")]


@pytest.mark.parametrize(
    ("method", "path", "body", "needle"),
    [
        ("POST", "/api/integration/anthropic/connect/key", {}, "Missing key"),
        ("POST", "/api/integration/anthropic/connect/key", {"key": " "}, "must not be empty"),
        ("POST", "/api/integration/anthropic/connect/key", {"key": "k", "extra": 1}, "extra"),
        ("POST", "/api/integration/no-such-provider/connect/key", {"key": "k"}, "Unknown integration"),
        ("PATCH", "/api/credential/cred_x", {}, "Missing key"),
        ("POST", "/api/integration/openai/connect/oauth", {"methodID": "browser", "inputs": {}}, "no OAuth"),
        ("POST", "/api/integration/attempt/att_x/complete", {"code": "c"}, "no OAuth"),
        ("GET", "/api/integration/attempt/att_x", None, "no OAuth"),
    ],
)
def test_bad_requests_are_400_and_change_nothing(
    client: httpx.Client, settings: Settings, method: str, path: str, body: Any, needle: str
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["_tag"] == "InvalidRequestError" and needle in error["message"]
    assert not (Path(settings.data_dir) / "auth.json").exists()


def test_cancelling_an_oauth_attempt_has_nothing_to_cancel(client: httpx.Client) -> None:
    assert client.delete("/api/integration/attempt/att_x").status_code == 204
