"""Remote control of attached TUIs (``/tui/*``) and ``/log``: each route validates its body and
publishes the live event the TUI acts on, to the directory's ``/event`` subscribers."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import create_session
from tests.servers import ThreadServer
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.mark.parametrize(
    ("route", "body", "event", "properties"),
    [
        ("/tui/append-prompt", {"text": "hello"}, "tui.prompt.append", {"text": "hello"}),
        ("/tui/open-help", None, "tui.command.execute", {"command": "help.show"}),
        ("/tui/open-models", None, "tui.command.execute", {"command": "model.list"}),
        ("/tui/submit-prompt", None, "tui.command.execute", {"command": "prompt.submit"}),
        ("/tui/execute-command", {"command": "agent_cycle"}, "tui.command.execute", {"command": "agent.cycle"}),
        (
            "/tui/show-toast",
            {"message": "done", "variant": "success"},
            "tui.toast.show",
            {"message": "done", "variant": "success"},
        ),
        (
            "/tui/publish",
            {"type": "tui.prompt.append", "properties": {"text": "via publish"}},
            "tui.prompt.append",
            {"text": "via publish"},
        ),
    ],
)
def test_control_routes_publish_the_tui_event(
    client: httpx.Client, server: ThreadServer, route: str, body: dict | None, event: str, properties: dict
) -> None:
    events = EventCollector(f"{server.url}/event")
    events.wait_for(lambda f: f.type == "server.connected")
    answer = client.post(route, json=body) if body is not None else client.post(route)
    assert answer.status_code == 200 and answer.json() is True
    assert events.wait_for(lambda f: f.type == event).properties == properties
    events.close()


def test_select_session_checks_the_session(client: httpx.Client, server: ThreadServer) -> None:
    events = EventCollector(f"{server.url}/event")
    sid = create_session(client)["id"]
    assert client.post("/tui/select-session", json={"sessionID": sid}).json() is True
    assert events.wait_for(lambda f: f.type == "tui.session.select").properties == {"sessionID": sid}
    missing = client.post("/tui/select-session", json={"sessionID": "ses_" + "0" * 26})
    assert missing.status_code == 404
    events.close()


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/tui/append-prompt", {}),
        ("/tui/show-toast", {"message": "x", "variant": "loud"}),
        ("/tui/select-session", {"sessionID": "nope"}),
        ("/tui/publish", {"type": "tui.unknown", "properties": {}}),
        ("/log", {"service": "s", "level": "fatal", "message": "m"}),
    ],
)
def test_bad_bodies_are_named(client: httpx.Client, route: str, body: dict) -> None:
    answer = client.post(route, json=body)
    assert answer.status_code == 400 and answer.json()["data"]


def test_log_writes_the_entry(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="opensession.client"):
        assert client.post("/log", json={"service": "sdk", "level": "info", "message": "hello log"}).json() is True
    assert any("[sdk] hello log" in r.getMessage() for r in caplog.records)
