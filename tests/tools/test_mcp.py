"""MCP servers from opencode.json, against real servers written with the ``mcp`` SDK
(tests/mcp_server.py): over stdio and streamable HTTP, a crash in the middle of a call, a call
that never answers, run-time add/connect/disconnect, and no process left behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer, free_port, thread_server
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SCRIPT = str(Path(__file__).parent.parent / "mcp_server.py")


def local(marker: Path, **extra: Any) -> dict[str, Any]:
    """A stdio server; ``marker`` (an ignored argument) lets a test find its processes."""
    return {"type": "local", "command": [sys.executable, SCRIPT, "stdio", str(marker)], **extra}


def write_config(project_dir: Path, mcp: dict[str, Any], **extra: Any) -> None:
    (project_dir / "opencode.json").write_text(json.dumps({"mcp": mcp, **extra}))


def processes_of(marker: Path) -> list[int]:
    """The live test servers started with ``marker`` (not the shell that ties each to the server's
    life, whose command line names it too)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            if str(marker).encode() in cmdline and b"opensession-guard" not in cmdline:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def tool_parts(client: httpx.Client, sid: str) -> list[dict[str, Any]]:
    messages = client.get(f"/session/{sid}/message").json()
    return [p for m in messages for p in m["parts"] if p["type"] == "tool"]


def run_tools(client: httpx.Client, text: str, **session: Any) -> list[dict[str, Any]]:
    sid = create_session(client, **session)["id"]
    response = client.post(f"/session/{sid}/message", json=text_prompt(text))
    assert response.status_code == 200, response.text
    return tool_parts(client, sid)


@contextmanager
def mcp_process(transport: str) -> Iterator[str]:
    """The test server over streamable HTTP (``/mcp``) or SSE only (``/sse``) on loopback."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SCRIPT, transport, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "the MCP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"
    finally:
        process.terminate()
        process.wait(10)


def test_stdio_statuses_and_tool_results(
    project_dir: Path, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers = {
        "local": local(tmp_path, environment={"MCP_TEST_VALUE": "from-{env:MCP_TEST_SOURCE}"}),
        "off": local(tmp_path, enabled=False),
        "missing": {"type": "local", "command": [str(tmp_path / "no-such-server")]},
        "bad": {"type": "local"},
    }
    write_config(project_dir, servers)
    monkeypatch.setenv("MCP_TEST_SOURCE", "config")
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        statuses = client.get("/mcp").json()
        assert statuses["local"] == {"status": "connected"} and statuses["off"] == {"status": "disabled"}
        assert statuses["missing"]["status"] == "failed" and "no-such-server" in statuses["missing"]["error"]
        assert statuses["bad"] == {
            "status": "failed",
            "error": "Invalid configuration: command must be a non-empty array of strings",
        }
        parts = run_tools(
            client,
            'TOOL:local_add {"a": 2, "b": 3}\nTOOL:local_say {"first": "one", "second": "two"}\n'
            'TOOL:local_env {"name": "MCP_TEST_VALUE"}\nTOOL:local_pixel {}\nTOOL:local_broken {}',
        )
        states = {p["tool"]: p["state"] for p in parts}
        assert states["local_add"]["status"] == "completed" and states["local_add"]["output"] == "sum=5"
        assert states["local_add"]["input"] == {"a": 2, "b": 3}
        assert states["local_say"]["output"] == "one\n\ntwo"  # text blocks joined as OpenCode does
        assert states["local_env"]["output"] == "from-config"
        [image] = states["local_pixel"]["attachments"]
        assert image["type"] == "file" and image["mime"] == "image/png" and image["url"].startswith("data:image/png;")
        assert image["id"].startswith("prt") and image["messageID"] == parts[0]["messageID"]
        assert "broken" in states["local_broken"]["output"]  # isError: still the tool's answer
        assert len(processes_of(tmp_path)) == 1  # one process for "local"; "off" never started
    assert processes_of(tmp_path) == []  # stopped with the server


def test_a_server_started_through_bash_is_not_taken_for_a_remote_shell(
    client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    """bash reads ~/.bashrc when its stdin is a socket (as a remote shell's is) and it is a
    top-level shell. The server's event loop (uvloop) gives a child's stdin a socket pair, so a
    stdio server started through bash by a server that no shell started (``SHLVL`` unset or 0,
    as under systemd) read the user's ~/.bashrc: what it printed broke the stream, and a
    ``pyenv init`` there held one start past the connect timeout."""
    home = tmp_path / "home"
    home.mkdir()
    read = tmp_path / "bashrc-was-read"
    (home / ".bashrc").write_text(f"touch {read}\necho 'not a JSON-RPC message'\n")
    command = ["bash", "-c", f"exec {sys.executable} {SCRIPT} stdio"]
    write_config(
        project_dir,
        {"viabash": {"type": "local", "command": command, "environment": {"HOME": str(home), "SHLVL": "0"}}},
    )
    assert client.get("/mcp").json()["viabash"] == {"status": "connected"}
    (part,) = run_tools(client, 'TOOL:viabash_add {"a": 1, "b": 2}')
    assert part["state"]["output"] == "sum=3"
    assert not read.exists()


def test_tools_are_listed_again_for_each_step(client: httpx.Client, project_dir: Path, tmp_path: Path) -> None:
    write_config(project_dir, {"local": local(tmp_path)})
    parts = run_tools(client, "TOOL:local_grow {}\nTHEN:local_grown {}")
    assert [(p["tool"], p["state"]["output"]) for p in parts] == [
        ("local_grow", "added grown"),
        ("local_grown", "grown here"),
    ]


def test_prompts_are_commands(client: httpx.Client, project_dir: Path, tmp_path: Path) -> None:
    write_config(project_dir, {"local": local(tmp_path)})
    commands = {c["name"]: c for c in client.get("/command").json()}
    assert commands["local:review"] == {
        "name": "local:review",
        "source": "mcp",
        "description": "Review a file",
        "template": "Review $1, looking at $2.",
        "hints": ["$1", "$2"],
    }
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/command", json={"command": "local:review", "arguments": "app.py naming"})
    assert reply.status_code == 200, reply.text
    users = [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]
    assert users[0]["parts"][0]["text"] == "Review app.py, looking at naming."


def test_a_rule_on_the_tool_name_asks(
    server: ThreadServer, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    write_config(project_dir, {"local": local(tmp_path)}, permission={"local_*": "ask"})
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt('TOOL:local_add {"a": 1, "b": 1}'))
        asked = events.wait_for(lambda f: f.type == "permission.asked").properties
        assert asked["permission"] == "local_add" and asked["patterns"] == ["*"] and asked["always"] == ["*"]
        client.post(f"/permission/{asked['id']}/reply", json={"reply": "once"})
        events.wait_idle(sid)
    assert tool_parts(client, sid)[0]["state"]["output"] == "sum=2"


def test_a_denied_server_is_not_offered(client: httpx.Client, project_dir: Path, tmp_path: Path) -> None:
    write_config(project_dir, {"local": local(tmp_path)}, permission={"local_*": "deny"})
    assert run_tools(client, 'TOOL:local_add {"a": 1, "b": 1}') == []  # the echo model only calls offered tools


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_remote_servers(client: httpx.Client, project_dir: Path, transport: str) -> None:
    """Streamable HTTP first; a server that only speaks SSE is reached on the fallback."""
    with mcp_process(transport) as url:
        write_config(project_dir, {"remote": {"type": "remote", "url": url, "headers": {"X-Test": "1"}}})
        assert client.get("/mcp").json() == {"remote": {"status": "connected"}}
        [part] = run_tools(client, 'TOOL:remote_add {"a": 40, "b": 2}')
        assert part["state"]["status"] == "completed" and part["state"]["output"] == "sum=42"
        resources = client.get("/experimental/resource").json()
        assert resources == {
            "remote:read_me": {
                "name": "read me",
                "uri": "notes://readme",
                "description": "The project notes",
                "mimeType": "text/plain",
                "client": "remote",
            }
        }


class _Unauthorized(BaseHTTPRequestHandler):
    def _deny(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _deny

    def log_message(self, *args: Any) -> None:
        return None


def test_a_server_asking_for_credentials(client: httpx.Client, project_dir: Path) -> None:
    denier = HTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=denier.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{denier.server_port}/mcp"
    try:
        write_config(
            project_dir,
            {"oauth": {"type": "remote", "url": url}, "plain": {"type": "remote", "url": url, "oauth": False}},
        )
        statuses = client.get("/mcp").json()
    finally:
        denier.shutdown()
    assert statuses["oauth"] == {"status": "needs_auth"}
    assert statuses["plain"] == {"status": "failed", "error": f"{url} requires authentication (401 Unauthorized)"}


def test_crash_fails_the_call_and_the_server_then_reconnects(
    client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    write_config(project_dir, {"local": local(tmp_path)})
    [part] = run_tools(client, "TOOL:local_crash {}")
    assert part["state"]["status"] == "error"
    assert part["state"]["error"] == "MCP server local closed the connection during crash"
    assert client.get("/mcp").json()["local"] == {"status": "failed", "error": part["state"]["error"]}
    assert processes_of(tmp_path) == []
    assert run_tools(client, "TOOL:local_add {}") == []  # a failed server offers no tools
    assert client.post("/mcp/local/connect").json() is True
    assert client.get("/mcp").json()["local"] == {"status": "connected"}
    [part] = run_tools(client, 'TOOL:local_add {"a": 1, "b": 2}')
    assert part["state"]["output"] == "sum=3"


def test_a_hung_call_is_bounded_by_the_timeout(client: httpx.Client, project_dir: Path, tmp_path: Path) -> None:
    write_config(project_dir, {"local": local(tmp_path, timeout=1000)})
    assert client.get("/mcp").json()["local"] == {"status": "connected"}
    started = time.monotonic()
    [part] = run_tools(client, "TOOL:local_hang {}")
    assert time.monotonic() - started < 8
    assert part["state"]["error"] == "MCP server local did not answer hang within 1s"
    assert client.get("/mcp").json()["local"]["status"] == "failed"
    assert processes_of(tmp_path) == []  # the hung server was ended


def test_abort_ends_a_hung_call_and_the_server_stays_up(
    server: ThreadServer, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    write_config(project_dir, {"local": local(tmp_path)})
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:local_hang {}"))
        events.wait_for(
            lambda f: (
                f.type == "message.part.updated" and f.properties["part"].get("state", {}).get("status") == "running"
            )
        )
        assert client.post(f"/session/{sid}/abort").json() is True
        events.wait_idle(sid)
    assert tool_parts(client, sid)[0]["state"]["error"] == "Tool execution aborted"
    assert client.get("/mcp").json()["local"] == {"status": "connected"}  # the user stopped it, not the server
    [part] = run_tools(client, 'TOOL:local_add {"a": 1, "b": 2}')
    assert part["state"]["output"] == "sum=3"


def test_add_connect_disconnect(client: httpx.Client, tmp_path: Path) -> None:
    added = client.post("/mcp", json={"name": "extra", "config": local(tmp_path)})
    assert added.status_code == 200 and added.json() == {"extra": {"status": "connected"}}
    assert client.post("/mcp/extra/disconnect").json() is True
    assert client.get("/mcp").json() == {"extra": {"status": "disabled"}}
    assert processes_of(tmp_path) == []
    assert run_tools(client, 'TOOL:extra_add {"a": 1, "b": 2}') == []
    assert client.post("/mcp/extra/connect").json() is True
    [part] = run_tools(client, 'TOOL:extra_add {"a": 1, "b": 2}')
    assert part["state"]["output"] == "sum=3"
    refused = client.post("/mcp/extra/auth")
    assert refused.status_code == 400 and "not supported" in refused.json()["error"]
    assert client.post("/mcp/extra/auth/callback", json={"code": "x"}).status_code == 400
    assert client.post("/mcp/extra/auth/callback", json={}).status_code == 400
    assert client.delete("/mcp/extra/auth").json() == {"success": True}
    assert client.post("/mcp/nope/auth").status_code == 404
    missing = client.post("/mcp/nope/connect")
    assert missing.status_code == 404
    assert missing.json() == {"_tag": "McpServerNotFoundError", "message": "MCP server not found: nope", "name": "nope"}
    assert client.post("/mcp/nope/disconnect").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"config": {"type": "local", "command": ["x"]}}, "name"),
        ({"name": "x", "config": {"type": "local"}}, "command"),
        ({"name": "x", "config": {"type": "local", "command": ["x"], "timeout": 0}}, "timeout"),
        ({"name": "x", "config": {"type": "remote", "url": "ftp://x"}}, "url"),
        ({"name": "x", "config": {"type": "local", "command": ["x"], "commands": []}}, "commands"),
        ({"name": "x", "config": {"type": "other"}}, "type"),
    ],
)
def test_add_validates_the_body(client: httpx.Client, body: dict[str, Any], field: str) -> None:
    response = client.post("/mcp", json=body)
    assert response.status_code == 400 and response.json()["name"] == "BadRequest"
    assert field in response.json()["data"]["message"]


def test_no_mcp_import_at_start_up(database_url: str) -> None:
    """Start-up time is tracked: the SDK loads when a server first connects."""
    code = "import app.api.app, app.runtime.service, sys; print('mcp' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True
    )
    assert result.stdout.strip() == "False"
