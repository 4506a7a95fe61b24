"""The agent loop with tools over HTTP: permission round trips through every reply route, saved
"always" rules across a restart, bash abort, the doom loop, and a full turn against an
OpenAI-compatible stub that calls tools."""

from __future__ import annotations

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, git_repository, running, text_prompt
from tests.servers import StubReply, ThreadServer, free_port, openai_stub, thread_server
from tests.sse import EventCollector

ASK_BASH = [{"permission": "bash", "pattern": "*", "action": "ask"}]


def _asked(events: EventCollector, sid: str) -> dict:
    return events.wait_for(lambda f: f.type == "permission.asked" and f.properties["sessionID"] == sid).properties


def _texts(client: httpx.Client, sid: str) -> list[str]:
    return [p["text"] for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "text"]


def _tool_parts(client: httpx.Client, sid: str) -> list[dict]:
    return [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]


def _reply(client: httpx.Client, route: str, sid: str, request_id: str, reply: str, message: str | None) -> None:
    if route == "current":
        response = client.post(f"/permission/{request_id}/reply", json={"reply": reply, "message": message})
        assert response.status_code == 200 and response.json() is True
    elif route == "deprecated":
        response = client.post(f"/session/{sid}/permissions/{request_id}", json={"response": reply})
        assert response.status_code == 200 and response.json() is True
    else:
        body = {"reply": reply} | ({"message": message} if message else {})
        response = client.post(f"/api/session/{sid}/permission/{request_id}/reply", json=body)
        assert response.status_code == 204


ROUND_TRIPS = [
    (route, reply, message)
    for route in ("current", "deprecated", "v2")
    for reply, message in (("once", None), ("always", None), ("reject", None), ("reject", "use ls instead"))
    if not (route == "deprecated" and message)  # the deprecated route carries no message
]


@pytest.mark.parametrize(("route", "reply", "message"), ROUND_TRIPS)
def test_permission_round_trip(
    server: ThreadServer, client: httpx.Client, route: str, reply: str, message: str | None
) -> None:
    sid = create_session(client, permission=ASK_BASH)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo approved"))
        asked = _asked(events, sid)
        assert asked["permission"] == "bash" and asked["patterns"] == ["echo approved"]
        assert asked["always"] == ["echo *"] and asked["tool"]["callID"]
        assert client.get("/permission").json() == [asked]
        assert client.get("/session/status").json() == {sid: {"type": "busy"}}  # blocked, still busy
        v2_pending = client.get(f"/api/session/{sid}/permission").json()["data"]
        assert [r["id"] for r in v2_pending] == [asked["id"]] and v2_pending[0]["action"] == "bash"
        _reply(client, route, sid, asked["id"], reply, message)
        replied = events.wait_for(lambda f: f.type == "permission.replied")
        assert replied.properties == {"sessionID": sid, "requestID": asked["id"], "reply": reply}
        events.wait_idle(sid)
    tool = _tool_parts(client, sid)[0]
    texts = _texts(client, sid)
    if reply in ("once", "always"):
        assert tool["state"]["status"] == "completed" and tool["state"]["output"] == "approved\n"
        assert texts[-1] == "Tool result seen: approved "
    elif message:
        assert tool["state"]["status"] == "error" and message in tool["state"]["error"]
        assert texts[-1].startswith("Tool result seen: Error: The user rejected")  # the loop went on
    else:
        assert tool["state"]["status"] == "error" and "rejected" in tool["state"]["error"]
        assert texts == ["TOOL:bash echo approved"]  # no follow-up step
    assert client.get("/permission").json() == []
    saved = client.get("/api/permission/saved").json()["data"]
    assert bool(saved) == (reply == "always")


def test_permission_requests_belong_to_their_directory(
    server: ThreadServer, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    """As OpenCode's instance per directory: another directory (here the server's own) neither
    lists a request nor answers it (404, as for an unknown id); the asking session's directory
    does both, as the TUI sends it (``?directory=<cwd>`` or the header)."""
    tui = tmp_path / "tui"
    tui.mkdir()
    created = client.post("/session", params={"directory": str(tui)}, json={"permission": ASK_BASH})
    sid = created.json()["id"]
    with EventCollector(f"{server.url}/global/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo approved"))
        asked = _asked(events, sid)
        assert client.get("/permission").json() == []
        assert client.get("/permission", headers={"x-opencode-directory": str(project_dir)}).json() == []
        v2 = client.get("/api/permission/request", params={"location[directory]": str(project_dir)}).json()
        assert v2 == {"location": {"directory": str(project_dir)}, "data": []}
        for refused in (
            client.post(f"/permission/{asked['id']}/reply", json={"reply": "once"}),
            client.post(f"/session/{sid}/permissions/{asked['id']}", json={"response": "once"}),
        ):
            assert refused.status_code == 404 and refused.json()["_tag"] == "PermissionNotFoundError"
        assert client.get("/permission", headers={"x-opencode-directory": str(tui)}).json() == [asked]
        v2 = client.get("/api/permission/request", params={"location[directory]": str(tui)}).json()
        assert [r["id"] for r in v2["data"]] == [asked["id"]]
        reply = client.post(f"/permission/{asked['id']}/reply", params={"directory": str(tui)}, json={"reply": "once"})
        assert reply.status_code == 200 and reply.json() is True
        events.wait_idle(sid)
    assert _tool_parts(client, sid)[0]["state"]["status"] == "completed"


def test_always_is_saved_across_a_restart(settings: Settings, tmp_path: Path) -> None:
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client, permission=ASK_BASH)["id"]
        with EventCollector(f"{server.url}/event") as events:
            client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo once"))
            asked = _asked(events, sid)
            client.post(f"/permission/{asked['id']}/reply", json={"reply": "always"})
            events.wait_idle(sid)
        saved = client.get("/api/permission/saved").json()["data"]
        assert [(s["action"], s["resource"]) for s in saved] == [("bash", "echo *")]
    restarted = settings.model_copy(update={"port": free_port()})
    with thread_server(restarted) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client, permission=ASK_BASH)["id"]
        reply = client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash echo again")).json()
        assert reply["parts"][1]["text"] == "Tool result seen: again "  # no question asked
        assert client.get("/api/permission/saved").json()["data"][0]["resource"] == "echo *"
        forgotten = client.delete(f"/api/permission/saved/{saved[0]['id']}")
        assert forgotten.status_code == 204 and client.get("/api/permission/saved").json()["data"] == []


def test_a_forgotten_always_asks_again_on_the_next_turn(server: ThreadServer, client: httpx.Client) -> None:
    """Saved rules are kept between turns on SQLite; saving and forgetting one both apply at once."""
    sid = create_session(client, permission=ASK_BASH)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo once"))
        client.post(f"/permission/{_asked(events, sid)['id']}/reply", json={"reply": "always"})
        events.wait_idle(sid)
    reply = client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash echo again")).json()
    assert reply["parts"][1]["text"] == "Tool result seen: again "  # no question asked
    saved = client.get("/api/permission/saved").json()["data"]
    assert client.delete(f"/api/permission/saved/{saved[0]['id']}").status_code == 204
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo third"))
        assert _asked(events, sid)["patterns"] == ["echo third"]
        client.post(f"/permission/{_asked(events, sid)['id']}/reply", json={"reply": "once"})
        events.wait_idle(sid)


def test_abort_kills_bash_and_leaves_no_request(server: ThreadServer, client: httpx.Client, project_dir: Path) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash sleep 30 & echo $! > pid; wait"))
        events.wait_for(
            lambda f: (
                f.type == "message.part.updated" and f.properties["part"].get("state", {}).get("status") == "running"
            )
        )
        for _ in range(1500):  # up to 30 s on a loaded machine
            if (project_dir / "pid").exists() and (project_dir / "pid").read_text().strip():
                break
            time.sleep(0.02)
        child = int((project_dir / "pid").read_text())
        assert client.post(f"/session/{sid}/abort").json() is True
        events.wait_idle(sid)
    tool = _tool_parts(client, sid)[0]
    assert tool["state"]["status"] == "error" and tool["state"]["error"] == "Tool execution aborted"
    assert tool["state"]["metadata"]["interrupted"] is True
    time.sleep(0.1)
    assert not running(child)

    ask_sid = create_session(client, permission=ASK_BASH)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{ask_sid}/prompt_async", json=text_prompt("TOOL:bash echo never"))
        asked = _asked(events, ask_sid)
        client.post(f"/session/{ask_sid}/abort")
        events.wait_for(lambda f: f.type == "permission.replied" and f.properties["requestID"] == asked["id"])
    assert client.get("/permission").json() == []


def test_always_racing_an_abort_saves_only_what_was_answered(server: ThreadServer, client: httpx.Client) -> None:
    """A rule is saved only if the user's ``always`` answered the request; when the abort got
    there first, the reply finds no request (404) and nothing is saved."""
    outcomes: set[tuple[int, str]] = set()
    with EventCollector(f"{server.url}/event") as events:
        for _ in range(20):
            sid = create_session(client, permission=ASK_BASH)["id"]
            client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo raced"))
            asked = _asked(events, sid)

            async def race(sid: str = sid, request_id: str = asked["id"]) -> httpx.Response:
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

                    async def reply() -> httpx.Response:
                        await asyncio.sleep(random.uniform(0, 0.002))
                        return await http.post(f"/permission/{request_id}/reply", json={"reply": "always"})

                    _, answer = await asyncio.gather(http.post(f"/session/{sid}/abort"), reply())
                    return answer

            answer = asyncio.run(race())
            events.wait_idle(sid)
            replied = events.wait_for(
                lambda f, rid=asked["id"]: f.type == "permission.replied" and f.properties["requestID"] == rid  # type: ignore[misc]
            )
            saved = client.get("/api/permission/saved").json()["data"]
            outcomes.add((answer.status_code, replied.properties["reply"]))
            if replied.properties["reply"] == "always":
                assert answer.status_code == 200
            else:
                assert answer.status_code == 404 and saved == [], (answer.status_code, saved)
            for rule in saved:
                client.delete(f"/api/permission/saved/{rule['id']}")
    assert (404, "reject") in outcomes, outcomes  # the race did happen both ways


def test_three_identical_calls_ask_the_doom_loop_permission(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "a.txt").write_text("same\n")
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(
            f"/session/{sid}/prompt_async", json=text_prompt("TOOL:read a.txt\nTOOL:read a.txt\nTOOL:read a.txt")
        )
        asked = _asked(events, sid)
        assert asked["permission"] == "doom_loop" and asked["patterns"] == ["read"]
        client.post(f"/permission/{asked['id']}/reply", json={"reply": "once"})
        events.wait_idle(sid)
    assert [p["state"]["status"] for p in _tool_parts(client, sid)] == ["completed"] * 3


def test_todo_diff_task_and_shell(server: ThreadServer, client: httpx.Client, project_dir: Path) -> None:
    git_repository(project_dir)
    sid = create_session(client)["id"]
    todos = [{"content": "plan", "status": "in_progress", "priority": "high"}]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/message", json=text_prompt("TOOL:todowrite " + json.dumps({"todos": todos})))
        assert events.wait_for(lambda f: f.type == "todo.updated").properties["todos"] == todos
        client.post(
            f"/session/{sid}/message",
            json=text_prompt('TOOL:write {"filePath": "made.txt", "content": "one\\ntwo\\n"}'),
        )
        diff_event = events.wait_for(lambda f: f.type == "session.diff")
    assert client.get(f"/session/{sid}/todo").json() == todos
    diff = client.get(f"/session/{sid}/diff").json()
    assert diff == diff_event.properties["diff"] and diff[0]["file"] == "made.txt" and diff[0]["additions"] == 2
    assert client.get(f"/session/{sid}").json()["summary"] == {"additions": 2, "deletions": 0, "files": 1}

    reply = client.post(
        f"/session/{sid}/message", json=text_prompt('TOOL:task {"description": "sub job", "prompt": "hello child"}')
    ).json()
    assert reply["parts"][1]["text"] == "Tool result seen: Echo: hello child"
    children = client.get(f"/session/{sid}/children").json()
    assert len(children) == 1 and children[0]["parentID"] == sid

    shell = client.post(f"/session/{sid}/shell", json={"agent": "build", "command": "echo from-shell"})
    assert shell.status_code == 200
    part = shell.json()["parts"][-1]
    assert part["type"] == "tool" and part["tool"] == "bash" and part["state"]["output"] == "from-shell\n"
    user = client.get(f"/session/{sid}/message").json()[-2]
    assert user["parts"][0]["text"] == "The following tool was executed by the user"
    assert client.post(f"/session/{sid}/shell", json={"command": "ls"}).status_code == 400
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.2 busy"))
        events.wait_for(lambda f: f.type == "message.part.delta")
        busy = client.post(f"/session/{sid}/shell", json={"agent": "build", "command": "ls"})
        assert busy.status_code == 409 and busy.json()["_tag"] == "SessionBusyError"
        events.wait_idle(sid)


def test_a_shell_command_in_a_directory_that_is_gone_fails_as_a_tool_not_the_request(
    client: httpx.Client, tmp_path: Path
) -> None:
    """The session's directory was removed (or is on another machine): the command's part fails
    with the reason, the message is closed, and the request answers 200 like any failed command."""
    gone = tmp_path / "gone"
    gone.mkdir()
    sid = client.post("/session", params={"directory": str(gone)}).json()["id"]
    gone.rmdir()
    shell = client.post(f"/session/{sid}/shell", json={"agent": "build", "command": "echo hi"})
    assert shell.status_code == 200, shell.text
    reply = shell.json()
    part = reply["parts"][-1]
    assert part["tool"] == "bash" and part["state"]["status"] == "error", part["state"]
    assert str(gone) in part["state"]["error"] and "completed" in reply["info"]["time"]


def _shell_runs(client: httpx.Client, sid: str) -> list[dict]:
    return [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "assistant"]


def test_a_shell_command_sent_again_with_its_idempotency_key_runs_once(client: httpx.Client, project_dir: Path) -> None:
    """nginx passes a POST to another replica, with the same Idempotency-Key, when the first died
    mid-request; a client may retry too. The copy answers the first run's reply, even while that
    run still goes on (it waits for it), and the command runs once."""
    sid = create_session(client)["id"]
    body = {"agent": "build", "command": "echo ran >> runs.txt; sleep 0.5"}
    keyed = {"Idempotency-Key": "shell-once"}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, f"/session/{sid}/shell", json=body, headers=keyed)
        deadline = time.monotonic() + 10
        while not (project_dir / "runs.txt").exists():  # the first run is under way
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.01)
        during = pool.submit(client.post, f"/session/{sid}/shell", json=body, headers=keyed)
        first_reply, during_reply = first.result(timeout=30), during.result(timeout=30)
    after = client.post(f"/session/{sid}/shell", json=body, headers=keyed)
    assert first_reply.status_code == during_reply.status_code == after.status_code == 200, during_reply.text
    assert first_reply.json() == during_reply.json() == after.json()
    assert first_reply.json()["parts"][-1]["state"]["status"] == "completed"
    assert (project_dir / "runs.txt").read_text() == "ran\n"
    assert len(_shell_runs(client, sid)) == 1
    other = client.post(f"/session/{sid}/shell", json={"agent": "build", "command": "ls"}, headers=keyed)
    assert other.status_code == 409 and "shell-once" in other.text, other.text
    unkeyed = client.post(f"/session/{sid}/shell", json=body)
    assert unkeyed.status_code == 200 and len(_shell_runs(client, sid)) == 2
    assert (project_dir / "runs.txt").read_text() == "ran\nran\n"


def test_disabled_tools_are_not_offered(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash ls", tools={"bash": False})).json()
    assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "step-finish"]
    assert {"permission": "bash", "pattern": "*", "action": "deny"} in client.get(f"/session/{sid}").json()[
        "permission"
    ]


def test_full_turn_with_an_openai_compatible_model(project_dir: Path, client: httpx.Client) -> None:
    (project_dir / "hello.txt").write_text("hello from file\n")

    def reply(body: dict) -> StubReply:
        last = body["messages"][-1]
        if "title generator" in body["messages"][0]["content"]:
            return StubReply(content=["t"])
        if last["role"] == "tool":
            return StubReply(content=["The file says hello."])
        return StubReply(
            content=[],
            tool_calls=[{"id": "call_1", "name": "read", "arguments": json.dumps({"filePath": "hello.txt"})}],
        )

    with openai_stub(reply) as stub:
        config = {
            "model": "stub/m",
            "provider": {
                "stub": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": stub.url}, "models": {"m": {}}}
            },
        }
        (project_dir / "opencode.json").write_text(json.dumps(config))
        sid = create_session(client)["id"]
        answer = client.post(f"/session/{sid}/message", json=text_prompt("what does hello.txt say?")).json()
        assert answer["parts"][1]["text"] == "The file says hello."
        turn = [r for r in stub.requests if "title generator" not in r["messages"][0]["content"]]
    assert {t["function"]["name"] for t in turn[0]["tools"]} >= {"read", "write", "edit", "bash", "glob", "grep"}
    follow_up = turn[1]["messages"]
    assert follow_up[-2]["role"] == "assistant"
    assert follow_up[-2]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"filePath":"hello.txt"}'}}
    ]
    assert follow_up[-1]["role"] == "tool" and follow_up[-1]["tool_call_id"] == "call_1"
    assert "1: hello from file" in follow_up[-1]["content"]
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"].get("finish") for m in history[1:]] == ["tool-calls", "stop"]


def test_project_commands(server: ThreadServer, client: httpx.Client, project_dir: Path) -> None:
    config = {"command": {"greet": {"description": "Say hello", "template": "Say hello to $1 ($ARGUMENTS)"}}}
    (project_dir / "opencode.json").write_text(json.dumps(config))
    listed = client.get("/command").json()
    assert [c["name"] for c in listed] == ["init", "greet"] and listed[0]["source"] == "command"
    assert listed[1] == {"name": "greet", "description": "Say hello", "template": "Say hello to $1 ($ARGUMENTS)"}
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        reply = client.post(f"/session/{sid}/command", json={"command": "greet", "arguments": "Ada Lovelace"})
        executed = events.wait_for(lambda f: f.type == "command.executed")
    assert reply.status_code == 200
    assert reply.json()["parts"][1]["text"] == "Echo: Say hello to Ada (Ada Lovelace)"
    assert executed.properties == {
        "name": "greet",
        "sessionID": sid,
        "arguments": "Ada Lovelace",
        "messageID": reply.json()["info"]["id"],
    }
    missing = client.post(f"/session/{sid}/command", json={"command": "nope", "arguments": ""})
    assert missing.status_code == 404 and missing.json()["data"]["message"] == "Command not found: nope"


def test_plan_agent_cannot_edit(client: httpx.Client, project_dir: Path) -> None:
    assert {a["name"]: a["mode"] for a in client.get("/agent").json()} == {
        "build": "primary",
        "plan": "primary",
        "general": "subagent",
    }
    sid = create_session(client)["id"]
    write = 'TOOL:write {"filePath": "plan.txt", "content": "x"}'
    planned = client.post(f"/session/{sid}/message", json=text_prompt(write, agent="plan")).json()
    assert [p["type"] for p in planned["parts"]] == ["step-start", "text", "step-finish"]  # write not offered
    assert not (project_dir / "plan.txt").exists()
    built = client.post(f"/session/{sid}/message", json=text_prompt(write, agent="build")).json()
    assert built["parts"][1]["text"] == "Tool result seen: Wrote file successfully."
    assert (project_dir / "plan.txt").read_text() == "x"


def test_agents_declared_in_the_project_config(project_dir: Path, client: httpx.Client) -> None:
    config = {
        "agent": {
            "reviewer": {
                "description": "Reviews code",
                "mode": "primary",
                "prompt": "You review code.",
                "tools": {"bash": False},
            },
            "general": {"disable": True},
        }
    }
    (project_dir / "opencode.json").write_text(json.dumps(config))
    agents = {a["name"]: a for a in client.get("/agent").json()}
    assert set(agents) == {"build", "plan", "reviewer"} and agents["reviewer"]["prompt"] == "You review code."
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash ls", agent="reviewer")).json()
    assert reply["info"]["agent"] == "reviewer"
    assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "step-finish"]  # bash denied: not offered


def test_init_has_the_model_write_agents_md(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    body = {"providerID": "opensession", "modelID": "echo", "messageID": "msg_0000000000001init"}
    assert client.post(f"/session/{sid}/init", json=body).json() is True
    user, reply = client.get(f"/session/{sid}/message").json()
    assert user["info"]["id"] == body["messageID"] and "AGENTS.md" in user["parts"][0]["text"]
    assert reply["info"]["parentID"] == body["messageID"] and reply["info"]["finish"] == "stop"
    bad = client.post(f"/session/{sid}/init", json={"providerID": "opensession", "modelID": "echo"})
    assert bad.status_code == 400 and "messageID" in bad.text
    missing = client.post("/session/ses_missing000000000000000000/init", json=body)
    assert missing.status_code == 404
