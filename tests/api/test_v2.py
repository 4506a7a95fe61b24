"""The V2 API over the same runtime: admission records and idempotency, steer/queue ordering,
gap-free replay, interrupt, wait, and one session driven through both protocols."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

import app.runtime.sessions._service as sessions_service
from tests.helpers import text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector

MISSING = "ses_000000000000000000000000000"


def create(client: httpx.Client, **body: object) -> dict:
    response = client.post("/api/session", json=body)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def prompt(client: httpx.Client, sid: str, text: str, **extra: object) -> dict:
    response = client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": text}, **extra})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def history(client: httpx.Client, sid: str) -> list[dict]:
    events: list[dict] = []
    after = None
    while True:
        params = {"limit": 100} | ({"after": after} if after is not None else {})
        page = client.get(f"/api/session/{sid}/history", params=params).json()
        events += page["data"]
        if not page["hasMore"]:
            return events
        after = events[-1]["durable"]["seq"]


def test_create_get_list_and_active(client: httpx.Client, project_dir: Path) -> None:
    session = create(client)
    assert session["location"] == {"directory": str(project_dir)}
    assert set(session) >= {"id", "projectID", "cost", "tokens", "time", "title", "location"}
    assert "total" not in session["tokens"]
    assert client.get(f"/api/session/{session['id']}").json() == {"data": session}
    chosen = "ses_7fffffffffff0000000000000001"
    explicit = create(client, id=chosen, agent="build", model={"id": "echo", "providerID": "opensession"})
    assert explicit["id"] == chosen and explicit["agent"] == "build" and explicit["model"]["id"] == "echo"
    duplicate = client.post("/api/session", json={"id": chosen})
    assert duplicate.status_code == 409 and duplicate.json()["_tag"] == "ConflictError"
    assert client.get("/api/session/active").json() == {"data": {}}
    # The same session through the legacy API.
    assert client.get(f"/session/{session['id']}").json()["id"] == session["id"]


def test_session_list_pages_with_a_cursor(client: httpx.Client) -> None:
    made = [create(client)["id"] for _ in range(5)]
    seen: list[str] = []
    page = client.get("/api/session", params={"limit": 2}).json()
    while True:
        seen += [s["id"] for s in page["data"]]
        cursor = page["cursor"].get("next")
        if cursor is None:
            break
        page = client.get("/api/session", params={"cursor": cursor, "limit": 2}).json()
    assert seen == list(reversed(made))  # newest first, each once
    ascending = client.get("/api/session", params={"order": "asc", "limit": 100}).json()["data"]
    assert [s["id"] for s in ascending] == made


def test_sessions_updated_in_one_millisecond_are_listed_newest_first(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal times are ordered by creation too (session ids sort newest first, so the tie goes
    by id the other way), and a cursor between them neither skips nor repeats one."""
    monkeypatch.setattr(sessions_service, "now_ms", lambda: 1_700_000_000_000)
    made = [create(client)["id"] for _ in range(4)]
    monkeypatch.undo()
    seen: list[str] = []
    page = client.get("/api/session", params={"limit": 3}).json()
    while True:
        seen += [s["id"] for s in page["data"]]
        if (cursor := page["cursor"].get("next")) is None:
            break
        page = client.get("/api/session", params={"cursor": cursor, "limit": 3}).json()
    assert seen == list(reversed(made))
    ascending = client.get("/api/session", params={"order": "asc", "limit": 100}).json()["data"]
    assert [s["id"] for s in ascending] == made


def test_prompt_is_idempotent_and_conflicts_on_new_content(client: httpx.Client) -> None:
    sid = create(client)["id"]
    message_id = "msg_00000000000100000000000002"
    first = prompt(client, sid, "hello v2", id=message_id, resume=False)
    assert first == {
        "admittedSeq": first["admittedSeq"],
        "id": message_id,
        "sessionID": sid,
        "prompt": {"text": "hello v2"},
        "delivery": "steer",
        "timeCreated": first["timeCreated"],
    }
    assert prompt(client, sid, "hello v2", id=message_id, resume=False) == first
    # resume: false admits without waking: nothing is promoted, no message exists yet.
    assert client.get(f"/api/session/{sid}/message").json()["data"] == []
    conflict = client.post(f"/api/session/{sid}/prompt", json={"id": message_id, "prompt": {"text": "other"}})
    assert conflict.status_code == 409 and conflict.json()["_tag"] == "ConflictError"
    # A later prompt that wakes the session promotes the parked one too.
    prompt(client, sid, "wake up")
    assert client.post(f"/api/session/{sid}/wait").status_code == 204
    texts = [m.get("text") for m in client.get(f"/api/session/{sid}/message", params={"order": "asc"}).json()["data"]]
    assert texts[0] == "hello v2" and "wake up" in texts
    record = prompt(client, sid, "hello v2", id=message_id)
    assert record["promotedSeq"] > record["admittedSeq"]


def test_steer_is_promoted_before_earlier_queued_prompts(server: ThreadServer, client: httpx.Client) -> None:
    sid = create(client)["id"]
    with EventCollector(f"{server.url}/api/session/{sid}/event") as events:
        p1 = prompt(client, sid, "SLOW:0.15 first")
        events.wait_for(lambda f: f.type == "session.next.text.started")
        p2 = prompt(client, sid, "second", delivery="queue")
        p3 = prompt(client, sid, "third", delivery="steer")
        p4 = prompt(client, sid, "fourth", delivery="queue", resume=False)
        assert client.post(f"/api/session/{sid}/wait").status_code == 204
    log = history(client, sid)
    prompted = [e["data"]["messageID"] for e in log if e["type"] == "session.next.prompted"]
    assert prompted == [p1["id"], p3["id"], p2["id"], p4["id"]]
    # Each promotion is followed by its own step, and steps never overlap.
    kinds = [
        e["type"]
        for e in log
        if e["type"] in ("session.next.prompted", "session.next.step.started", "session.next.step.ended")
    ]
    assert kinds == ["session.next.prompted", "session.next.step.started", "session.next.step.ended"] * 4
    messages = client.get(f"/api/session/{sid}/message", params={"order": "asc"}).json()["data"]
    replies = [m["content"][0]["text"] for m in messages if m["type"] == "assistant"]
    assert replies == ["Echo: SLOW:0.15 first", "Echo: third", "Echo: second", "Echo: fourth"]


def test_replay_from_any_cursor_is_gap_free_while_events_are_produced(
    server: ThreadServer, client: httpx.Client
) -> None:
    sid = create(client)["id"]
    prompt(client, sid, "warm up")
    client.post(f"/api/session/{sid}/wait")
    mid = len(history(client, sid)) // 2
    cursors = [0, mid, mid + 3]
    collectors = []
    for cursor in cursors:
        collectors.append(EventCollector(f"{server.url}/api/session/{sid}/event?after={cursor}"))
        prompt(client, sid, f"SLOW:0.01 while replaying from {cursor}", delivery="queue")
    reconnect = EventCollector(f"{server.url}/api/session/{sid}/event", headers={"Last-Event-ID": str(mid)})
    client.post(f"/api/session/{sid}/wait")
    last = history(client, sid)[-1]["durable"]["seq"]
    for cursor, collector in [*zip(cursors, collectors, strict=True), (mid, reconnect)]:
        collector.wait_for(lambda f, last=last: f.id == str(last), timeout=15)  # type: ignore[misc]
        seqs = [f.data["durable"]["seq"] for f in collector.frames]
        assert seqs == list(range(cursor + 1, last + 1)), f"gap or duplicate replaying after {cursor}"
        assert [int(str(f.id)) for f in collector.frames] == seqs
        assert all(f.type != "session.next.text.delta" for f in collector.frames)  # durable only


def test_a_v2_session_cursor_past_the_head(server: ThreadServer, client: httpx.Client) -> None:
    """On a session's V2 stream and history an explicit ``after=`` past its last seq is a 400
    naming the problem; a reconnect's ``Last-Event-ID`` past it starts at the head and says so."""
    sid = create(client)["id"]
    for path in ("event", "history"):
        refused = client.get(f"/api/session/{sid}/{path}", params={"after": 500})
        assert refused.status_code == 400, path
        assert refused.json()["_tag"] == "InvalidRequestError" and "after=500" in refused.json()["message"]
    url = f"{server.url}/api/session/{sid}/event"
    with EventCollector(url, headers={"Last-Event-ID": "500"}) as events:
        notice = events.wait_for(lambda _f: True)
        prompt(client, sid, "after a reset")
        client.post(f"/api/session/{sid}/wait")
        last = history(client, sid)[-1]["durable"]["seq"]
        events.wait_for(lambda f: f.id == str(last))
        frames = events.snapshot()
    head = int(notice.properties["after"])
    assert notice.type == "server.cursor.unknown" and notice.properties["lastEventID"] == "500"
    assert [f.data["durable"]["seq"] for f in frames[1:]] == list(range(head + 1, last + 1))


def test_interrupt_keeps_partial_text_and_leaves_active(server: ThreadServer, client: httpx.Client) -> None:
    sid = create(client)["id"]
    with EventCollector(f"{server.url}/api/event") as events:
        prompt(client, sid, "SLOW:0.3 interrupt me")
        events.wait_for(lambda f: f.type == "session.next.text.delta" and f.properties["sessionID"] == sid)
        assert client.get("/api/session/active").json() == {"data": {sid: {"type": "running"}}}
        assert client.post(f"/api/session/{sid}/interrupt").status_code == 204
        failed = events.wait_for(lambda f: f.type == "session.next.step.failed")
    assert failed.properties["error"] == {"type": "unknown", "message": "Provider turn interrupted"}
    ended = next(f for f in events.frames if f.type == "session.next.text.ended")
    assert ended.properties["text"] and "Echo: SLOW:0.3 interrupt me".startswith(ended.properties["text"])
    assert client.get("/api/session/active").json() == {"data": {}}
    assert client.get("/session/status").json() == {}
    reply = client.get(f"/api/session/{sid}/message").json()["data"][0]
    assert reply["type"] == "assistant" and reply["error"]["message"] == "Aborted"
    assert reply["content"][0]["text"] == ended.properties["text"]
    assert client.post(f"/api/session/{sid}/interrupt").status_code == 204  # idle: still 204


def test_wait_answers_only_once_idle(client: httpx.Client) -> None:
    sid = create(client)["id"]
    prompt(client, sid, "SLOW:0.1 take a moment")
    done = client.post(f"/api/session/{sid}/wait")
    assert done.status_code == 204
    assert client.get("/api/session/active").json() == {"data": {}}
    reply = client.get(f"/api/session/{sid}/message").json()["data"][0]
    assert reply["finish"] == "stop" and "completed" in reply["time"]


def test_one_session_driven_by_both_protocols(server: ThreadServer, client: httpx.Client) -> None:
    sid = client.post("/session").json()["id"]
    with (
        EventCollector(f"{server.url}/event") as legacy,
        EventCollector(f"{server.url}/api/session/{sid}/event?after=0") as v2,
    ):
        assert client.post(f"/session/{sid}/message", json=text_prompt("from legacy")).status_code == 200
        prompt(client, sid, "from v2")
        client.post(f"/api/session/{sid}/wait")
        final = history(client, sid)[-1]["durable"]["seq"]
        v2.wait_for(lambda f: f.id == str(final))
        legacy.wait_for(
            lambda f: f.type == "session.idle" and len([g for g in legacy.frames if g.type == "session.idle"]) >= 2
        )
    legacy_texts = [
        f.properties["part"]["text"]
        for f in legacy.frames
        if f.type == "message.part.updated"
        and f.properties["part"]["type"] == "text"
        and f.properties["part"].get("time", {}).get("end")
    ]
    assert legacy_texts == ["Echo: from legacy", "Echo: from v2"]
    assert not any(f.type.startswith("session.next.") for f in legacy.frames)
    v2_texts = [f.data["data"]["text"] for f in v2.frames if f.type == "session.next.text.ended"]
    assert v2_texts == ["Echo: from legacy", "Echo: from v2"]
    legacy_history = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["role"] for m in legacy_history] == ["user", "assistant", "user", "assistant"]
    v2_history = client.get(f"/api/session/{sid}/message", params={"order": "asc"}).json()["data"]
    assert [m.get("text") for m in v2_history if m["type"] == "user"] == ["from legacy", "from v2"]


def test_active_and_status_agree_at_every_moment(server: ThreadServer, client: httpx.Client) -> None:
    sid = create(client)["id"]
    coordinator = server.runtime.coordinator
    samples: list[tuple[set[str], set[str]]] = []
    stop = threading.Event()

    async def sample() -> None:
        while not stop.is_set():
            samples.append((set(coordinator.active()), set(coordinator.statuses())))
            await asyncio.sleep(0)

    future = asyncio.run_coroutine_threadsafe(sample(), server.loop)
    for i in range(5):
        prompt(client, sid, f"SLOW:0.02 turn {i}", delivery="queue")
    client.post(f"/api/session/{sid}/wait")
    stop.set()
    future.result(timeout=5)
    assert any(active for active, _ in samples)
    assert all(active == statuses for active, statuses in samples)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "tag"),
    [
        ("GET", f"/api/session/{MISSING}", None, 404, "SessionNotFoundError"),
        ("POST", f"/api/session/{MISSING}/prompt", {"prompt": {"text": "x"}}, 404, "SessionNotFoundError"),
        ("POST", f"/api/session/{MISSING}/wait", None, 404, "SessionNotFoundError"),
        ("GET", f"/api/session/{MISSING}/message", None, 404, "SessionNotFoundError"),
        ("GET", f"/api/session/{MISSING}/context", None, 404, "SessionNotFoundError"),
        ("GET", "/api/session/nonsense", None, 400, "InvalidRequestError"),
        ("GET", "/api/session?cursor=!!!", None, 400, "InvalidCursorError"),
        ("POST", "/api/session", {"unknown": 1}, 400, "InvalidRequestError"),
    ],
)
def test_v2_errors_are_tagged(
    client: httpx.Client, method: str, path: str, body: object, status: int, tag: str
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["_tag"] == tag
    assert response.json()["message"]


def test_v2_request_validation(client: httpx.Client) -> None:
    sid = create(client)["id"]
    missing = client.post(f"/api/session/{sid}/prompt", json={})
    assert missing.status_code == 400
    assert missing.json() == {
        "_tag": "InvalidRequestError",
        "message": "Missing key\n  at ['prompt']",
        "kind": "Payload",
    }
    over = client.get(f"/api/session/{sid}/history", params={"limit": 101})
    assert over.status_code == 400 and over.json()["_tag"] == "InvalidRequestError"
    assert over.json()["kind"] == "Query"
    bad_delivery = client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": "x"}, "delivery": "now"})
    assert bad_delivery.status_code == 400
    cursor_and_order = client.get(f"/api/session/{sid}/message", params={"cursor": "abc", "order": "asc"})
    assert cursor_and_order.status_code == 400
    assert cursor_and_order.json()["message"] == "Cursor cannot be combined with order"
    bad_cursor = client.get(f"/api/session/{sid}/message", params={"cursor": "e30"})
    assert bad_cursor.status_code == 400 and bad_cursor.json()["_tag"] == "InvalidCursorError"
    missing_message = client.get(f"/api/session/{sid}/message/msg_000000000000000000000000000")
    assert missing_message.status_code == 404 and missing_message.json()["_tag"] == "MessageNotFoundError"


def test_create_without_a_body_and_prompt_with_files(client: httpx.Client) -> None:
    sid = client.post("/api/session").json()["data"]["id"]  # the SDK sends no body for create({})
    body = {"prompt": {"text": "see attached", "files": [{"uri": "file:///tmp/notes.txt", "name": "notes.txt"}]}}
    record = client.post(f"/api/session/{sid}/prompt", json=body).json()["data"]
    assert record["prompt"]["files"] == [{"uri": "file:///tmp/notes.txt", "name": "notes.txt", "mime": "text/plain"}]
    client.post(f"/api/session/{sid}/wait")
    user = client.get(f"/api/session/{sid}/message", params={"order": "asc"}).json()["data"][0]
    assert user["text"] == "see attached"
    assert user["files"] == [{"uri": "file:///tmp/notes.txt", "mime": "text/plain", "name": "notes.txt"}]
    legacy_parts = client.get(f"/session/{sid}/message").json()[0]["parts"]
    assert [p["type"] for p in legacy_parts] == ["text", "file"]


def test_agent_and_model_switches_are_recorded(client: httpx.Client) -> None:
    sid = create(client)["id"]
    assert client.post(f"/api/session/{sid}/agent", json={"agent": "plan"}).status_code == 204
    model = {"model": {"id": "echo", "providerID": "opensession"}}
    assert client.post(f"/api/session/{sid}/model", json=model).status_code == 204
    unknown = client.post(f"/api/session/{sid}/model", json={"model": {"id": "nope", "providerID": "nope"}})
    assert unknown.status_code == 400 and unknown.json()["_tag"] == "InvalidRequestError"
    info = client.get(f"/api/session/{sid}").json()["data"]
    assert info["agent"] == "plan" and info["model"]["id"] == "echo"
    events = {e["type"]: e["data"] for e in history(client, sid)}
    assert events["session.next.agent.switched"]["agent"] == "plan"
    assert events["session.next.model.switched"]["model"]["providerID"] == "opensession"
    prompt(client, sid, "which agent?")
    client.post(f"/api/session/{sid}/wait")
    context = client.get(f"/api/session/{sid}/context").json()["data"]
    assert [m["type"] for m in context] == ["user", "assistant"]
    assert context[1]["agent"] == "plan"
