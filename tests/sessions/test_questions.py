"""The ``question`` tool over HTTP: the asked event, answers reaching the model, dismissal
stopping the turn, the legacy and V2 routes, unknown and settled ids, bad bodies, an abort while
the tool waits, and a restart while it waits (nothing is left pending)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer, free_port, thread_server
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

QUESTIONS = [
    {
        "question": "Favourite colour?",
        "header": "Colour",
        "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}],
    },
    {
        "question": "Pets?",
        "header": "Pets",
        "options": [{"label": "Cat", "description": "purrs"}, {"label": "Dog", "description": "barks"}],
        "multiple": True,
    },
]
PROMPT = "TOOL:question " + json.dumps({"questions": QUESTIONS})


def _ask(server: ThreadServer, client: httpx.Client, events: EventCollector) -> tuple[str, dict]:
    sid = create_session(client)["id"]
    assert client.post(f"/session/{sid}/prompt_async", json=text_prompt(PROMPT)).status_code == 204
    asked = events.wait_for(lambda f: f.type == "question.asked" and f.properties["sessionID"] == sid)
    return sid, asked.properties


def _tool_part(client: httpx.Client, sid: str) -> dict:
    return next(p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool")


def _texts(client: httpx.Client, sid: str) -> list[str]:
    return [p["text"] for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "text"]


def test_asked_event_and_listings(server: ThreadServer, client: httpx.Client) -> None:
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        assert asked["id"].startswith("que_") and asked["sessionID"] == sid
        assert asked["questions"] == QUESTIONS
        part = _tool_part(client, sid)
        assert asked["tool"] == {"messageID": part["messageID"], "callID": part["callID"]}
        v2 = events.wait_for(lambda f: f.type == "question.v2.asked").properties
        assert v2 == asked
        assert client.get("/question").json() == [asked]
        assert client.get(f"/api/session/{sid}/question").json() == {"data": [asked]}
        assert client.get("/api/question/request").json()["data"] == [asked]
        assert client.get("/session/status").json() == {sid: {"type": "busy"}}  # the tool waits
        assert client.post(f"/question/{asked['id']}/reject").json() is True
        events.wait_idle(sid)
    assert client.get("/question").json() == []


def test_questions_belong_to_their_directory(
    server: ThreadServer, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    """Another directory neither lists a question nor answers or dismisses it (404); the asking
    session's directory does, as the TUI running there sends it."""
    other = str(tmp_path / "other")
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        assert client.get("/question", headers={"x-opencode-directory": other}).json() == []
        v2 = client.get("/api/question/request", params={"location[directory]": other}).json()
        assert v2 == {"location": {"directory": other}, "data": []}
        for action, body in (("reply", {"answers": [["Red"], ["Cat"]]}), ("reject", None)):
            refused = client.post(f"/question/{asked['id']}/{action}", params={"directory": other}, json=body)
            assert refused.status_code == 404 and refused.json()["_tag"] == "QuestionNotFoundError"
        mine = {"x-opencode-directory": str(project_dir)}
        assert client.get("/question", headers=mine).json() == [asked]
        assert client.post(f"/question/{asked['id']}/reject", headers=mine).json() is True
        events.wait_idle(sid)
    assert _tool_part(client, sid)["state"]["status"] == "error"


@pytest.mark.parametrize("route", ["legacy", "v2"])
def test_reply_reaches_the_model(server: ThreadServer, client: httpx.Client, route: str) -> None:
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        answers = [["Red"], ["Cat", "Dog"]]
        if route == "legacy":
            response = client.post(f"/question/{asked['id']}/reply", json={"answers": answers})
            assert response.status_code == 200 and response.json() is True
        else:
            response = client.post(f"/api/session/{sid}/question/{asked['id']}/reply", json={"answers": answers})
            assert response.status_code == 204
        replied = events.wait_for(lambda f: f.type == "question.replied")
        assert replied.properties == {"sessionID": sid, "requestID": asked["id"], "answers": answers}
        events.wait_idle(sid)
    state = _tool_part(client, sid)["state"]
    assert state["status"] == "completed" and state["title"] == "Asked 2 questions"
    assert state["output"] == (
        'User has answered your questions: "Favourite colour?"="Red", "Pets?"="Cat, Dog". '
        "You can now continue with the user's answers in mind."
    )
    assert state["metadata"]["answers"] == answers
    assert _texts(client, sid)[-1].startswith('Tool result seen: User has answered your questions: "Favourite')
    assert client.get("/question").json() == []


def test_unanswered_questions_are_said_so(server: ThreadServer, client: httpx.Client) -> None:
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        client.post(f"/question/{asked['id']}/reply", json={"answers": [[]]})
        events.wait_idle(sid)
    assert '"Pets?"="Unanswered"' in _tool_part(client, sid)["state"]["output"]


@pytest.mark.parametrize("route", ["legacy", "v2"])
def test_reject_fails_the_tool_and_stops_the_turn(server: ThreadServer, client: httpx.Client, route: str) -> None:
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        if route == "legacy":
            assert client.post(f"/question/{asked['id']}/reject").json() is True
        else:
            assert client.post(f"/api/session/{sid}/question/{asked['id']}/reject").status_code == 204
        rejected = events.wait_for(lambda f: f.type == "question.rejected")
        assert rejected.properties == {"sessionID": sid, "requestID": asked["id"]}
        events.wait_idle(sid)
    state = _tool_part(client, sid)["state"]
    assert state["status"] == "error" and state["error"] == "The user dismissed this question"
    assert _texts(client, sid) == [PROMPT]  # no step after the dismissal


def test_unknown_and_settled_ids_are_not_found(server: ThreadServer, client: httpx.Client) -> None:
    missing = client.post("/question/que_nope/reply", json={"answers": [["Red"]]})
    assert missing.status_code == 404
    assert missing.json() == {
        "_tag": "QuestionNotFoundError",
        "requestID": "que_nope",
        "message": "Question request not found: que_nope",
    }
    assert client.post("/question/que_nope/reject").status_code == 404
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        other = create_session(client)["id"]
        wrong = client.post(f"/api/session/{other}/question/{asked['id']}/reply", json={"answers": [["Red"]]})
        assert wrong.status_code == 404 and wrong.json()["_tag"] == "QuestionNotFoundError"
        assert client.post(f"/question/{asked['id']}/reply", json={"answers": [["Red"], ["Cat"]]}).status_code == 200
        for again in (
            client.post(f"/question/{asked['id']}/reply", json={"answers": [["Blue"]]}),
            client.post(f"/question/{asked['id']}/reject"),
        ):
            assert again.status_code == 404 and again.json()["requestID"] == asked["id"]
        events.wait_idle(sid)
    assert [f.type for f in events.of_session(sid)].count("question.replied") == 1


@pytest.mark.parametrize(
    "body", [{}, {"answers": "Red"}, {"answers": [[1]]}, {"answers": ["Red"]}], ids=["missing", "str", "int", "flat"]
)
def test_bad_bodies_are_400(client: httpx.Client, body: dict) -> None:
    response = client.post("/question/que_abc/reply", json=body)
    assert response.status_code == 400 and response.json()["name"] == "BadRequest"
    sid = create_session(client)["id"]
    v2 = client.post(f"/api/session/{sid}/question/que_abc/reply", json=body)
    assert v2.status_code == 400 and v2.json()["_tag"] == "InvalidRequestError"
    assert client.post("/question/abc/reply", json={"answers": []}).status_code == 400  # not a question id


def test_abort_while_waiting_rejects_the_question(server: ThreadServer, client: httpx.Client) -> None:
    with EventCollector(f"{server.url}/event") as events:
        sid, asked = _ask(server, client, events)
        assert client.post(f"/session/{sid}/abort").json() is True
        rejected = events.wait_for(lambda f: f.type == "question.rejected")
        assert rejected.properties == {"sessionID": sid, "requestID": asked["id"]}
        events.wait_idle(sid)
    late = client.post(f"/question/{asked['id']}/reply", json={"answers": [["Red"]]})
    assert late.status_code == 404 and late.json()["_tag"] == "QuestionNotFoundError"
    assert client.get("/question").json() == []
    state = _tool_part(client, sid)["state"]
    assert state["status"] == "error" and state["error"] == "Tool execution aborted"


def test_a_restart_leaves_no_question_waiting(settings: Settings) -> None:
    """As with a tool waiting for a permission: recovery fails the waiting tool (its answer is
    lost with the process) and answers the prompt again; no dead question is listed."""
    with (
        thread_server(settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
        EventCollector(f"{server.url}/event") as events,
    ):
        sid, asked = _ask(server, client, events)
    restarted = settings.model_copy(update={"port": free_port()})
    with thread_server(restarted) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        deadline = time.monotonic() + 15
        while _texts(client, sid)[-1] == PROMPT and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _texts(client, sid)[-1] == "Tool result seen: Error: Tool execution aborted"
        assert _tool_part(client, sid)["state"]["status"] == "error"
        assert client.get("/question").json() == []
        assert client.post(f"/question/{asked['id']}/reply", json={"answers": [["Red"]]}).status_code == 404


def test_malformed_questions_go_back_to_the_model(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    bad = {"questions": [{"question": "Colour?", "header": "Colour", "options": ["Red"]}]}
    client.post(f"/session/{sid}/message", json=text_prompt("TOOL:question " + json.dumps(bad)))
    state = _tool_part(client, sid)["state"]
    assert state["status"] == "error" and "options" in state["error"]
    assert _texts(client, sid)[-1].startswith("Tool result seen: Error:")  # the model heard why
    assert client.get("/question").json() == []
