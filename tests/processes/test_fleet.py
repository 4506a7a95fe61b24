"""``opensession mcp``: the fleet MCP server, spawned as a real stdio subprocess and driven with the
MCP SDK's own client, against two real opensession servers on the offline echo model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from app.settings import Settings
from tests.servers import ROOT, ThreadServer, free_port, start_in_thread, thread_server

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TOOLS = {
    "create_session",
    "send_message",
    "get_session_status",
    "get_session_messages",
    "interrupt_session",
    "reset_session",
}
BLOCKING = "TOOL:bash sleep 300"  # a turn that runs until it is interrupted
HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}


@pytest.fixture
def server_b(settings: Settings, tmp_path: Path) -> Iterator[ThreadServer]:
    """A second server, with its own database and project directory."""
    project = tmp_path / "project-b"
    project.mkdir()
    other = Settings(
        db=f"sqlite+aiosqlite:///{tmp_path / 'b.db'}",
        directory=str(project),
        config_dir=settings.config_dir,
        data_dir=str(tmp_path / "data-b"),
        port=free_port(),
    )
    with thread_server(other) as handle:
        yield handle


@asynccontextmanager
async def fleet(
    *nodes: str, wait: float | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """``python -m app.cli mcp --node NAME=URL ...`` as a stdio subprocess (``env`` added to a
    clean environment), initialized."""
    args = ["-m", "app.cli", "mcp"]
    for node in nodes:
        args += ["--node", node]
    if wait is not None:
        args += ["--wait", str(wait)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_SERVER_", "OPENSESSION_"))}
    params = StdioServerParameters(
        command=sys.executable, args=args, env=clean | {"PYTHONPATH": str(ROOT)} | (env or {})
    )
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's successful result (its structured content, which its text repeats)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


async def failure(session: ClientSession, tool: str, **arguments: Any) -> str:
    """A tool's error result (isError), as its one line of text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    (content,) = result.content
    text: str = content.text  # type: ignore[union-attr]
    assert "\n" not in text
    return text


def session_exists(server: ThreadServer, session_id: str) -> bool:
    return httpx.get(f"{server.url}/session/{session_id}", timeout=10).status_code == 200


async def test_tools_are_listed_with_their_arguments(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description
        assert "node" in tool.input_schema["properties"]
        assert "node" not in tool.input_schema.get("required", [])
    send = tools["send_message"].input_schema
    assert send["required"] == ["text"]
    assert send["properties"]["text"]["type"] == "string"
    assert {"type": "number", "minimum": 0} in send["properties"]["wait_seconds"]["anyOf"]
    assert tools["get_session_messages"].input_schema["properties"]["limit"]["type"] == "integer"
    # the results' shapes are published too (and the SDK's client checks each result against them)
    reply = tools["send_message"].output_schema
    assert reply is not None and set(reply["required"]) == {"node", "sessionID", "timedOut", "text", "tools"}
    status = tools["get_session_status"].output_schema
    assert status is not None and status["properties"]["status"]["enum"] == ["idle", "busy"]
    assert all(tool.output_schema and "sessionID" in tool.output_schema["required"] for tool in tools.values())


async def test_send_message_answers_the_reply(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}") as session:
        reply = await call(session, "send_message", text="hello fleet")  # one node: no need to name it
        assert reply["timedOut"] is False
        assert reply["text"] == "Echo: hello fleet"
        assert reply["node"] == "a"
        assert session_exists(server, reply["sessionID"])
        second = await call(session, "send_message", node="a", text="TOOL:bash echo tool-ran")
        assert second["sessionID"] == reply["sessionID"]  # one long-lived session per node
        assert second["tools"] == [{"tool": "bash", "status": "completed", "title": "echo tool-ran"}]
        assert second["text"].startswith("Tool result seen: tool-ran")
        status = await call(session, "get_session_status")
        assert status == {"node": "a", "sessionID": reply["sessionID"], "status": "idle"}
        transcript = await call(session, "get_session_messages", limit=4)
    messages = transcript["messages"]
    assert [m["role"] for m in messages] == ["assistant", "user", "assistant", "assistant"]
    assert messages[0]["text"] == "Echo: hello fleet"
    assert messages[1]["text"] == "TOOL:bash echo tool-ran"
    assert messages[2]["tools"][0]["tool"] == "bash"  # the step that called the tool, then the answer
    assert messages[3]["text"] == second["text"]


async def test_nodes_are_independent(server: ThreadServer, server_b: ThreadServer) -> None:
    async with fleet(f"a={server.url}", f"b={server_b.url}") as session:
        on_a = await call(session, "send_message", node="a", text="for a")
        on_b = await call(session, "send_message", node="b", text="for b")
        assert (on_a["text"], on_b["text"]) == ("Echo: for a", "Echo: for b")
        assert session_exists(server, on_a["sessionID"]) and not session_exists(server, on_b["sessionID"])
        assert session_exists(server_b, on_b["sessionID"]) and not session_exists(server_b, on_a["sessionID"])
        texts_a = [m["text"] for m in (await call(session, "get_session_messages", node="a"))["messages"]]
        assert texts_a == ["for a", "Echo: for a"]
        # a turn running on b leaves a idle and usable
        await call(session, "send_message", node="b", text=BLOCKING, wait_seconds=0.5)
        assert (await call(session, "get_session_status", node="b"))["status"] == "busy"
        assert (await call(session, "get_session_status", node="a"))["status"] == "idle"
        assert (await call(session, "send_message", node="a", text="still here"))["text"] == "Echo: still here"
        await call(session, "interrupt_session", node="b")


async def test_a_slow_turn_times_out_then_is_interrupted(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}", wait=600) as session:
        started = await call(session, "send_message", text=BLOCKING, wait_seconds=3)
        assert started["timedOut"] is True
        assert [(t["tool"], t["status"] in ("pending", "running")) for t in started["tools"]] == [("bash", True)]
        assert "bash" in started["note"]
        session_id = started["sessionID"]
        assert (await call(session, "get_session_status"))["status"] == "busy"
        refused = await failure(session, "reset_session")
        assert "busy" in refused and session_id in refused
        interrupted = await call(session, "interrupt_session")
        assert interrupted["status"] == "idle" and interrupted["sessionID"] == session_id
        assert await call(session, "get_session_status") == {"node": "a", "sessionID": session_id, "status": "idle"}
        assert session_exists(server, session_id)  # interrupted, never deleted
        last = (await call(session, "get_session_messages", limit=1))["messages"][0]
        assert last["role"] == "assistant" and last["tools"][0]["status"] == "error"
        reset = await call(session, "reset_session")
        assert reset["previousSessionID"] == session_id and reset["sessionID"] != session_id
        assert session_exists(server, session_id) and session_exists(server, reset["sessionID"])
        after = await call(session, "send_message", text="fresh")
        assert after["sessionID"] == reset["sessionID"]
        transcript = (await call(session, "get_session_messages"))["messages"]
        assert [m["text"] for m in transcript] == ["fresh", "Echo: fresh"]


@contextmanager
def status_lagging_proxy(target: str) -> Iterator[str]:
    """A proxy to ``target`` whose ``/session/status`` always answers ``{}`` (all idle), as a
    server that has accepted a prompt but not started its turn yet; everything else (the event
    stream included) is passed through. Yields its URL."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/session/status":
            json_type = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": json_type})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
        async with httpx.AsyncClient(base_url=target, timeout=None) as http:
            request = http.build_request(
                scope["method"], scope["path"], params=scope["query_string"].decode(), content=body, headers=headers
            )
            response = await http.send(request, stream=True)
            passed = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": passed})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    port = free_port()
    server, thread = start_in_thread(app, port, lifespan="off")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


async def test_a_slow_reply_times_out_with_the_text_so_far(server: ThreadServer) -> None:
    """The echo model streams its reply in four deltas, each 2 s after the last: a wait of 5 s
    sees the first part of it (the margins are seconds wide either side)."""
    prompt = "SLOW:2 take your time"
    async with fleet(f"a={server.url}") as session:
        partial = await call(session, "send_message", text=prompt, wait_seconds=5)
        assert partial["timedOut"] is True and partial["tools"] == []
        assert partial["text"] and f"Echo: {prompt}".startswith(partial["text"])
        assert partial["text"] != f"Echo: {prompt}"
        assert "still working" in partial["note"]
        await call(session, "interrupt_session")


async def test_a_turn_waiting_for_a_permission_says_so(server: ThreadServer, project_dir: Path) -> None:
    (project_dir / "opencode.json").write_text(json.dumps({"permission": {"bash": "ask"}}))
    async with fleet(f"a={server.url}") as session:
        waiting = await call(session, "send_message", text="TOOL:bash echo asked", wait_seconds=3)
        assert waiting["timedOut"] is True
        assert waiting["waitingFor"] == ["permission bash (echo asked)"]
        assert "waiting for permission bash (echo asked)" in waiting["note"]
        assert (await call(session, "interrupt_session"))["status"] == "idle"


async def test_the_node_is_busy_from_the_moment_the_prompt_is_sent(server: ThreadServer) -> None:
    """Until the turn it sent ends, the node is busy even where the server does not say so yet."""
    with status_lagging_proxy(server.url) as url:
        async with fleet(f"a={url}") as session:
            sent = await call(session, "send_message", text="SLOW:0.3 hold on", wait_seconds=0)
            assert sent["timedOut"] is True
            assert (await call(session, "get_session_status"))["status"] == "busy"
            for _ in range(600):  # the turn ends by itself: the node is idle once its idle event came
                if (await call(session, "get_session_status"))["status"] == "idle":
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the node stayed busy after its turn ended")
            last = (await call(session, "get_session_messages", limit=1))["messages"][0]
            assert last["text"] == "Echo: SLOW:0.3 hold on"


async def test_a_prompt_sent_while_busy_joins_the_running_turn(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}") as session:
        first = await call(session, "send_message", text="TOOL:bash sleep 1", wait_seconds=0)
        assert first["timedOut"] is True
        joined = await call(session, "send_message", text="and then this", wait_seconds=600)
        assert joined["timedOut"] is False
        assert joined["text"].endswith("Echo: and then this")
        assert (await call(session, "get_session_status"))["status"] == "idle"


async def test_calls_are_served_while_a_send_waits(server: ThreadServer) -> None:
    """An agent can look at and interrupt a turn whose send_message is still waiting."""
    async with fleet(f"a={server.url}") as session:
        sending = asyncio.create_task(session.call_tool("send_message", {"text": BLOCKING, "wait_seconds": 600}))
        for _ in range(600):
            transcript = (await call(session, "get_session_messages"))["messages"]
            if any(tool["status"] == "running" for message in transcript for tool in message["tools"]):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the tool never ran")
        assert (await call(session, "get_session_status"))["status"] == "busy"
        assert not sending.done()
        assert (await call(session, "interrupt_session"))["status"] == "idle"
        ended = await sending
        assert not ended.is_error and ended.structured_content is not None
        assert ended.structured_content["timedOut"] is False
        assert ended.structured_content["tools"][0]["tool"] == "bash"


async def test_create_session_makes_a_fresh_current_session(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}") as session:
        first = await call(session, "send_message", text="one")
        created = await call(session, "create_session")
        assert created["sessionID"] != first["sessionID"] and session_exists(server, created["sessionID"])
        assert (await call(session, "get_session_status"))["sessionID"] == created["sessionID"]
        assert (await call(session, "get_session_messages"))["messages"] == []


async def test_a_session_deleted_behind_its_back_is_recreated(server: ThreadServer) -> None:
    async with fleet(f"a={server.url}") as session:
        first = await call(session, "send_message", text="before")
        assert httpx.delete(f"{server.url}/session/{first['sessionID']}", timeout=10).status_code == 200
        again = await call(session, "send_message", text="after")
        assert again["sessionID"] != first["sessionID"]
        assert again["text"] == "Echo: after" and again["timedOut"] is False
        assert httpx.delete(f"{server.url}/session/{again['sessionID']}", timeout=10).status_code == 200
        status = await call(session, "get_session_status")
        assert status["sessionID"] not in (first["sessionID"], again["sessionID"])
        assert status["status"] == "idle" and session_exists(server, status["sessionID"])


async def test_unknown_and_dead_nodes_are_error_results(server: ThreadServer) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with fleet(f"a={server.url}", f"dead={dead}") as session:
        assert "unknown node 'zz'" in await failure(session, "get_session_status", node="zz")
        assert "say which node" in await failure(session, "send_message", text="hi")
        for tool, arguments in [
            ("send_message", {"text": "hi"}),
            ("get_session_status", {}),
            ("get_session_messages", {}),
            ("interrupt_session", {}),
            ("reset_session", {}),
            ("create_session", {}),
        ]:
            message = await failure(session, tool, node="dead", **arguments)
            assert f"node dead: cannot reach {dead}" in message
        # the MCP server is still up, and the live node still answers
        assert (await call(session, "send_message", node="a", text="alive"))["text"] == "Echo: alive"


async def test_the_password_comes_from_the_environment(settings: Settings) -> None:
    with thread_server(settings.model_copy(update={"password": "pw"})) as locked:
        async with fleet(f"a={locked.url}") as session:
            assert "refused the credentials" in await failure(session, "send_message", text="hi")
        async with fleet(f"a={locked.url}", env={"OPENCODE_SERVER_PASSWORD": "pw"}) as session:
            assert (await call(session, "send_message", text="hi"))["text"] == "Echo: hi"


@pytest.mark.parametrize(
    ("node", "message"),
    [("x", "--node takes NAME=URL, got 'x'"), ("a=ftp://h", "--node a: not an http(s) URL: 'ftp://h'")],
)
def test_a_bad_node_is_one_line(database_url: str, node: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "mcp", "--node", node],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (1, f"opensession: {message}\n")


def test_the_command_line_leaves_the_client_libraries_unimported(database_url: str) -> None:
    """``serve`` starts through the same dispatcher: the mcp command's libraries load only when it runs."""
    code = "import app.cli, sys; print([m for m in ('mcp', 'httpx', 'httpx_sse') if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", code], env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert result.stdout.strip() == "[]", result.stderr
