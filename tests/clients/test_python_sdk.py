"""The official Python SDK (``opencode-ai`` 0.1.0a36 from PyPI, Stainless-generated, speaking
OpenCode's 0.x API) drives a real server, and every answer validates against the SDK's own
pydantic models. The SDK builds its response objects without validating them, so each check
re-validates the raw JSON with a ``TypeAdapter`` of the SDK's type: a missing field or a value
outside a ``Literal`` fails here even though the SDK call itself would not raise.

The same routes keep today's shapes for clients that are not Stainless SDKs (the JS SDK, the TUI):
checked at the end."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opencode_ai import Opencode
from opencode_ai import types as sdk
from pydantic import TypeAdapter

from tests.helpers import git_repository
from tests.servers import ThreadServer

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

ECHO: dict[str, Any] = {"provider_id": "opensession", "model_id": "echo"}


def valid(call: Callable[[], Any], model: Any) -> Any:
    """The raw JSON of an SDK call, validated against the SDK's type for it."""
    response = call()
    data = response.http_response.json()
    TypeAdapter(model).validate_python(data)
    return data


@pytest.fixture
def project(project_dir: Path) -> Path:
    (project_dir / "notes.txt").write_text("hello from the project\n")
    git_repository(project_dir)
    (project_dir / "notes.txt").write_text("hello from the project\nchanged\n")
    return project_dir


@pytest.fixture
def opencode(server: ThreadServer, project: Path) -> Iterator[Opencode]:
    with Opencode(base_url=server.url, max_retries=0) as client:
        yield client


def test_every_call_validates(opencode: Opencode) -> None:
    raw = opencode.with_raw_response
    app = valid(raw.app.get, sdk.App)
    assert app["git"] is True and app["path"]["cwd"]
    assert valid(raw.app.init, sdk.AppInitResponse) is True
    modes = valid(raw.app.modes, sdk.AppModesResponse)
    assert {m["name"] for m in modes} >= {"build", "plan"}
    assert next(m for m in modes if m["name"] == "plan")["tools"].get("edit") is False
    providers = valid(raw.app.providers, sdk.AppProvidersResponse)
    echo = next(p for p in providers["providers"] if p["id"] == "opensession")["models"]["echo"]
    assert echo["tool_call"] is True and "cache_read" in echo["cost"]
    valid(raw.config.get, sdk.Config)

    session = valid(raw.session.create, sdk.Session)
    sid = session["id"]
    assert sid in {s["id"] for s in valid(raw.session.list, sdk.SessionListResponse)}
    reply = valid(
        lambda: raw.session.chat(sid, parts=[{"type": "text", "text": "hello sdk"}], mode="build", **ECHO),
        sdk.AssistantMessage,
    )
    assert reply["role"] == "assistant" and reply["sessionID"] == sid and reply["system"] == []
    messages = valid(lambda: raw.session.messages(sid), sdk.SessionMessagesResponse)
    assert [m["info"]["role"] for m in messages] == ["user", "assistant"]
    assert any(p.get("text") == "Echo: hello sdk" for p in messages[1]["parts"])
    user_id = messages[0]["info"]["id"]

    assert valid(lambda: raw.session.share(sid), sdk.Session)["share"]["url"]
    assert "share" not in valid(lambda: raw.session.unshare(sid), sdk.Session)
    assert valid(lambda: raw.session.revert(sid, message_id=user_id), sdk.Session)["revert"]["messageID"] == user_id
    assert "revert" not in valid(lambda: raw.session.unrevert(sid), sdk.Session)
    assert valid(lambda: raw.session.summarize(sid, **ECHO), sdk.SessionSummarizeResponse) is True
    assert valid(lambda: raw.session.abort(sid), sdk.SessionAbortResponse) is True
    assert valid(lambda: raw.session.init(sid, message_id="msg_" + "1" * 26, **ECHO), sdk.SessionInitResponse)

    read = valid(lambda: raw.file.read(path="notes.txt"), sdk.FileReadResponse)
    assert read["type"] == "raw" and read["content"].rstrip("\n") == "hello from the project\nchanged"
    status = valid(raw.file.status, sdk.FileStatusResponse)
    assert [f["path"] for f in status] == ["notes.txt"]
    assert "notes.txt" in valid(lambda: raw.find.files(query="notes"), sdk.FindFilesResponse)
    matches = valid(lambda: raw.find.text(pattern="hello"), sdk.FindTextResponse)
    assert matches and matches[0]["path"]["text"] == "notes.txt"
    valid(lambda: raw.find.symbols(query="x"), sdk.FindSymbolsResponse)
    assert valid(lambda: raw.tui.append_prompt(text="hi"), sdk.TuiAppendPromptResponse) is True
    assert valid(raw.tui.open_help, sdk.TuiOpenHelpResponse) is True
    assert valid(lambda: raw.app.log(level="info", message="from the sdk", service="test"), sdk.AppLogResponse)
    assert valid(lambda: raw.session.delete(sid), sdk.SessionDeleteResponse) is True


def _events_until_idle(opencode: Opencode, ready: threading.Event, sink: list[dict[str, Any]], idle: int) -> None:
    with opencode.event.with_streaming_response.list() as response:
        ready.set()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            sink.append(json.loads(line[6:]))
            if sum(1 for e in sink if e["type"] == "session.idle") >= idle:
                return


def test_every_event_validates(opencode: Opencode) -> None:
    events: list[dict[str, Any]] = []
    ready = threading.Event()
    listener = threading.Thread(target=_events_until_idle, args=(opencode, ready, events, 2), daemon=True)
    listener.start()
    assert ready.wait(10)
    sid = opencode.session.create().id
    # Reasoning, a tool call with its steps, and a failed turn: events of every kind a turn makes.
    opencode.session.chat(sid, parts=[{"type": "text", "text": "REASON\nTOOL:bash echo from-a-tool"}], **ECHO)
    failed = opencode.session.chat(sid, parts=[{"type": "text", "text": "FAIL:fatal"}], **ECHO)
    assert failed.error is not None and failed.error.name == "UnknownError"
    listener.join(15)
    assert not listener.is_alive()
    adapter = TypeAdapter(sdk.EventListResponse)
    for event in events:
        adapter.validate_python(event)
    kinds = {e["type"] for e in events}
    assert {"server.connected", "message.updated", "message.part.updated", "session.error", "session.idle"} <= kinds
    tools = [e for e in events if e["type"] == "message.part.updated" and e["properties"]["part"]["type"] == "tool"]
    assert any(e["properties"]["part"]["state"]["status"] == "completed" for e in tools)


def test_current_clients_keep_todays_shapes(server: ThreadServer, project: Path) -> None:
    """Without the Stainless header the same routes answer as OpenCode's server does today."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        sid = client.post("/session").json()["id"]
        reply = client.post(f"/session/{sid}/message", json={"parts": [{"type": "text", "text": "hi"}]}).json()
        assert set(reply) == {"info", "parts"} and "system" not in reply["info"]
        assert client.get("/file", params={"path": "notes.txt"}).status_code == 400  # lists directories only
        assert isinstance(client.get("/file", params={"path": "."}).json(), list)
        model = client.get("/config/providers").json()["providers"][0]["models"]["echo"]
        assert "tool_call" not in model and "cache" in model["cost"]
