"""Provider credentials (``PUT``/``DELETE /auth/{providerID}``, ``GET /provider/auth``): saved in
``<data_dir>/auth.json`` (mode 0600), used by providers between the opencode.json ``apiKey`` and
the environment, from the next turn on, and never shown by any route or event."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import OpenAIStub, ThreadServer, openai_stub
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SECRET = "sk-fake-opensession-test-7f3a9c"


def _auth_file(settings: Settings) -> Path:
    return Path(settings.data_dir) / "auth.json"


def _write_config(directory: Path, base_url: str, api_key: str | None = None) -> None:
    options: dict[str, Any] = {"baseURL": base_url}
    if api_key is not None:
        options["apiKey"] = api_key
    config = {
        "model": "stub/stub-model",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stub",
                "env": ["OPENSESSION_TEST_STUB_KEY"],
                "options": options,
                "models": {"stub-model": {"name": "Stub Model"}},
            }
        },
    }
    (directory / "opencode.json").write_text(json.dumps(config))


@pytest.fixture
def stub(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        _write_config(project_dir, handle.url)
        yield handle


def _turn(client: httpx.Client, stub: OpenAIStub, sid: str | None = None) -> tuple[str, set[str]]:
    """Runs one prompt; answers the session and the Authorization headers the model saw for it (a
    title request of an earlier turn may still arrive meanwhile, with that turn's key)."""
    sid = sid or create_session(client)["id"]
    seen = len(stub.headers)
    reply = client.post(f"/session/{sid}/message", json=text_prompt("hi"))
    assert reply.status_code == 200, reply.text
    assert assistant_text(reply.json()) == "Hello from stub"
    exchanges = zip(stub.requests[seen:], stub.headers[seen:], strict=True)
    return sid, {h.get("authorization", "") for r, h in exchanges if "title generator" not in json.dumps(r)}


def test_put_and_delete_round_trip(client: httpx.Client, settings: Settings) -> None:
    path = _auth_file(settings)
    assert not path.exists()
    response = client.put("/auth/stub", json={"type": "api", "key": SECRET})
    assert response.status_code == 200 and response.json() is True
    assert json.loads(path.read_text()) == {"stub": {"type": "api", "key": SECRET}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    oauth = {"type": "oauth", "refresh": "r-fake", "access": "a-fake", "expires": 0, "accountId": "acct"}
    assert client.put("/auth/other", json=oauth).json() is True
    wellknown = {"type": "wellknown", "key": "https://example.invalid", "token": "t-fake"}
    assert client.put("/auth/known", json=wellknown).json() is True
    assert json.loads(path.read_text()) == {
        "stub": {"type": "api", "key": SECRET},
        "other": oauth,
        "known": wellknown,
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.name != "auth.json" and p.name.startswith(".auth-")]

    assert client.delete("/auth/stub").json() is True
    assert client.delete("/auth/never-saved").json() is True  # as OpenCode: not an error
    assert set(json.loads(path.read_text())) == {"other", "known"}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"type": "api"}, "key"),
        ({"type": "api", "key": 5}, "key"),
        ({"type": "oauth", "refresh": "r", "access": "a"}, "expires"),
        ({"type": "oauth", "refresh": "r", "access": "a", "expires": -1}, "expires"),
        ({"type": "wellknown", "key": "k"}, "token"),
        ({"type": "api", "key": "k", "extra": 1}, "extra"),
        ({"type": "api", "key": "k", "metadata": None}, "metadata"),
        ({"type": "oauth", "refresh": "r", "access": "a", "expires": 1, "accountId": None}, "accountId"),
        ({"type": "bogus", "key": "k"}, "bogus"),
        ({"key": "k"}, "type"),
        ([], ""),
    ],
)
def test_bad_bodies_are_400(client: httpx.Client, settings: Settings, body: Any, needle: str) -> None:
    response = client.put("/auth/stub", json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["name"] == "BadRequest" and error["data"]["kind"] == "Payload"
    assert needle in error["data"]["message"]
    assert not _auth_file(settings).exists()


def test_malformed_json_is_400(client: httpx.Client) -> None:
    response = client.put("/auth/stub", content=b"not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["name"] == "BadRequest"


def test_provider_auth_lists_api_methods(stub: OpenAIStub, client: httpx.Client) -> None:
    methods = client.get("/provider/auth").json()
    assert methods["stub"] == [{"type": "api", "label": "API key"}]
    assert methods["openai"] == [{"type": "api", "label": "Manually enter API Key"}]
    assert "opensession" not in methods
    for entries in methods.values():
        for method in entries:
            assert method["type"] == "api" and isinstance(method["label"], str)


def test_stored_key_is_used_on_the_next_turn(stub: OpenAIStub, client: httpx.Client) -> None:
    sid, headers = _turn(client, stub)
    assert headers == {""}  # no key anywhere: none sent
    assert client.put("/auth/stub", json={"type": "api", "key": SECRET}).json() is True
    _, headers = _turn(client, stub, sid)
    assert headers == {f"Bearer {SECRET}"}
    assert client.put("/auth/stub", json={"type": "api", "key": "sk-fake-second"}).json() is True
    _, headers = _turn(client, stub, sid)
    assert headers == {"Bearer sk-fake-second"}
    assert client.delete("/auth/stub").json() is True
    _, headers = _turn(client, stub, sid)
    assert headers == {""}


@pytest.mark.parametrize("dispose_first", [True, False])
def test_stored_key_with_instance_dispose(stub: OpenAIStub, client: httpx.Client, dispose_first: bool) -> None:
    """The TUI's /connect saves the key and disposes the instance; either order works."""
    sid, _ = _turn(client, stub)
    if dispose_first:
        assert client.post("/instance/dispose").json() is True
    assert client.put("/auth/stub", json={"type": "api", "key": SECRET}).json() is True
    if not dispose_first:
        assert client.post("/instance/dispose").json() is True
    _, headers = _turn(client, stub, sid)
    assert headers == {f"Bearer {SECRET}"}


def test_precedence_config_then_stored_then_env(
    stub: OpenAIStub, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENSESSION_TEST_STUB_KEY", "sk-fake-env")
    sid, headers = _turn(client, stub)
    assert headers == {"Bearer sk-fake-env"}

    assert client.put("/auth/stub", json={"type": "api", "key": SECRET}).json() is True
    _, headers = _turn(client, stub, sid)
    assert headers == {f"Bearer {SECRET}"}  # stored outranks the environment

    _write_config(project_dir, stub.url, api_key="sk-fake-config")
    _, headers = _turn(client, stub, sid)
    assert headers == {"Bearer sk-fake-config"}  # opencode.json outranks the stored key

    _write_config(project_dir, stub.url)
    assert client.put("/auth/stub", json={"type": "oauth", "refresh": "r", "access": "a", "expires": 1}).json()
    _, headers = _turn(client, stub, sid)
    assert headers == {"Bearer sk-fake-env"}  # only an api credential is a key


def test_key_is_never_answered_or_announced(
    stub: OpenAIStub, client: httpx.Client, server: ThreadServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []
    with EventCollector(f"{server.url}/event") as events, EventCollector(f"{server.url}/global/event") as global_events:
        bodies.append(client.put("/auth/stub", json={"type": "api", "key": SECRET}).text)
        # An invalid body carrying the key: the error names the field, not the value.
        bodies.append(client.put("/auth/stub", json={"type": "api", "key": SECRET, "extra": SECRET}).text)
        bodies.append(client.put("/auth/stub", json={"type": "wellknown", "key": SECRET}).text)
        sid, headers = _turn(client, stub)
        assert headers == {f"Bearer {SECRET}"}
        events.wait_idle(sid)
        global_events.wait_idle(sid)
        for path in (
            "/provider/auth",
            "/provider",
            "/config/providers",
            "/config",
            f"/session/{sid}",
            f"/session/{sid}/message",
            "/session",
            "/doc",
        ):
            response = client.get(path)
            assert response.status_code == 200, path
            bodies.append(response.text)
        bodies.append(client.post("/instance/dispose").text)
        bodies.append(client.delete("/auth/stub").text)
        frames = events.snapshot() + global_events.snapshot()
    assert frames
    logged = [record.getMessage() for record in caplog.records]
    for text in bodies + [json.dumps(f.data) for f in frames] + logged:
        assert SECRET not in text
