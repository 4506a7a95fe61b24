"""Prompting over the legacy API with the built-in echo model: admission, event order, the
synchronous reply, idempotency, retries and failures."""

from __future__ import annotations

import httpx

from app.settings import Settings
from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector


def test_plain_turn_event_order(server: ThreadServer, client: httpx.Client) -> None:
    session = create_session(client)
    sid = session["id"]
    with EventCollector(f"{server.url}/event") as events:
        events.wait_for(lambda f: f.type == "server.connected")
        response = client.post(f"/session/{sid}/prompt_async", json=text_prompt("hello world"))
        assert response.status_code == 204 and response.content == b""
        events.wait_idle(sid)
        frames = events.of_session(sid)
    order = [f.type for f in frames if f.type != "session.updated"]
    deltas = [f.properties["delta"] for f in frames if f.type == "message.part.delta"]
    assert len(deltas) >= 2
    expected = (
        [
            "message.updated",
            "message.part.updated",
            "session.status",
            "message.updated",
            "message.part.updated",
            "message.part.updated",
        ]
        + ["message.part.delta"] * len(deltas)
        + ["message.part.updated", "message.part.updated", "message.updated", "session.status", "session.idle"]
    )
    assert order == expected
    parts = [f.properties["part"] for f in frames if f.type == "message.part.updated"]
    assert [p["type"] for p in parts] == ["text", "step-start", "text", "text", "step-finish"]
    assert parts[2]["text"] == "" and "end" not in parts[2]["time"]
    assert parts[3]["text"] == "".join(deltas) == "Echo: hello world"
    assert parts[4]["reason"] == "stop" and parts[4]["tokens"]["output"] > 0
    statuses = [f.properties["status"]["type"] for f in frames if f.type == "session.status"]
    assert statuses == ["busy", "idle"]
    final = [f.properties["info"] for f in frames if f.type == "message.updated"][-1]
    assert final["role"] == "assistant" and final["finish"] == "stop" and "completed" in final["time"]
    # Every frame carries an SSE id that never goes backwards.
    cursors = [int(f.id) for f in frames if f.id is not None]
    assert len(cursors) == len(frames) and cursors == sorted(cursors)


def test_sync_prompt_returns_reply_and_history(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("sync please"))
    assert reply.status_code == 200
    body = reply.json()
    assert body["info"]["role"] == "assistant"
    assert assistant_text(body) == "Echo: sync please"
    assert [p["type"] for p in body["parts"]] == ["step-start", "text", "step-finish"]
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["role"] for m in history] == ["user", "assistant"]
    assert history[1]["info"]["parentID"] == history[0]["info"]["id"]
    single = client.get(f"/session/{sid}/message/{body['info']['id']}").json()
    assert single == history[1]
    info = client.get(f"/session/{sid}").json()
    assert info["title"] == "sync please"  # the default title was replaced after the first prompt
    assert info["agent"] == "build"
    assert info["model"] == {"id": "echo", "providerID": "opensession", "variant": "default"}
    assert info["tokens"]["output"] == body["info"]["tokens"]["output"]


def test_no_reply_stores_user_message_only(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("just store", noReply=True)).json()
    assert reply["info"]["role"] == "user"
    assert [m["info"]["role"] for m in client.get(f"/session/{sid}/message").json()] == ["user"]


def test_both_model_shapes_are_accepted(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    nested = text_prompt("one", model={"providerID": "opensession", "modelID": "echo"})
    flat = text_prompt("two", providerID="opensession", modelID="echo")
    for body in (nested, flat):
        reply = client.post(f"/session/{sid}/message", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["info"]["modelID"] == "echo"


def test_unknown_model_is_rejected_before_anything_is_stored(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    response = client.post(
        f"/session/{sid}/prompt_async", json=text_prompt("x", model={"providerID": "nope", "modelID": "nope"})
    )
    assert response.status_code == 400
    assert response.json()["name"] == "ProviderModelNotFoundError"
    assert response.json()["data"] | {"suggestions": []} == {"providerID": "nope", "modelID": "nope", "suggestions": []}
    assert client.get(f"/session/{sid}/message").json() == []


def test_client_message_id_is_idempotent_and_conflicts_on_new_content(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    message_id = "msg_00000000000100000000000001"
    body = text_prompt("once only", messageID=message_id)
    first = client.post(f"/session/{sid}/message", json=body)
    again = client.post(f"/session/{sid}/message", json=body)
    assert first.status_code == again.status_code == 200
    assert again.json()["info"]["id"] == first.json()["info"]["id"]
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["role"] for m in history] == ["user", "assistant"]
    assert history[0]["info"]["id"] == message_id
    conflict = client.post(f"/session/{sid}/prompt_async", json=text_prompt("other text", messageID=message_id))
    assert conflict.status_code == 409
    assert conflict.json()["_tag"] == "ConflictError"
    assert message_id in conflict.json()["message"]
    assert len(client.get(f"/session/{sid}/message").json()) == 2


def test_a_prompt_repeated_with_its_idempotency_key_is_admitted_once(client: httpx.Client) -> None:
    """A retry (a client's, or nginx's after a replica died with the request) carries the same
    Idempotency-Key: it gets the prompt already admitted, through whichever prompt route; the key
    belongs to its session, and a different prompt under it is a conflict."""
    sid, other = create_session(client)["id"], create_session(client)["id"]
    key = {"Idempotency-Key": "retry-1"}
    first = client.post(f"/session/{sid}/message", json=text_prompt("once only"), headers=key)
    again = client.post(f"/session/{sid}/message", json=text_prompt("once only"), headers=key)
    queued = client.post(f"/session/{sid}/prompt_async", json=text_prompt("once only"), headers=key)
    assert first.status_code == again.status_code == 200 and queued.status_code == 204
    assert again.json() == first.json()
    assert client.post(f"/session/{other}/message", json=text_prompt("once only"), headers=key).status_code == 200
    conflict = client.post(f"/session/{sid}/prompt_async", json=text_prompt("other text"), headers=key)
    assert conflict.status_code == 409 and "retry-1" in conflict.json()["message"], conflict.text
    unkeyed = client.post(f"/session/{sid}/message", json=text_prompt("once only"))  # no key: a new prompt
    assert unkeyed.status_code == 200
    users = [m["info"]["id"] for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]
    assert users == [first.json()["info"]["parentID"], unkeyed.json()["info"]["parentID"]]
    assert len(client.get(f"/session/{other}/message").json()) == 2
    v2_key = {"Idempotency-Key": "retry-2"}
    admitted = [
        client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": "v2"}}, headers=v2_key) for _ in "ab"
    ]
    assert [r.status_code for r in admitted] == [200, 200]
    first_v2, again_v2 = (r.json()["data"] for r in admitted)  # the second may find it promoted already
    assert (again_v2["id"], again_v2["admittedSeq"]) == (first_v2["id"], first_v2["admittedSeq"])
    too_long = client.post(
        f"/session/{sid}/prompt_async", json=text_prompt("x"), headers={"Idempotency-Key": "k" * 256}
    )
    assert too_long.status_code == 400 and "Idempotency-Key" in too_long.text


def test_reasoning_part_precedes_text(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt("REASON about this")).json()
    types = [p["type"] for p in reply["parts"]]
    assert types == ["step-start", "reasoning", "text", "step-finish"]
    reasoning = reply["parts"][1]
    assert reasoning["text"] and reasoning["time"]["end"] >= reasoning["time"]["start"]


def test_retryable_failure_is_retried_with_retry_status(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        reply = client.post(f"/session/{sid}/message", json=text_prompt("FAIL:retry:2 then answer"))
        events.wait_idle(sid)
        statuses = [f.properties["status"] for f in events.of_session(sid) if f.type == "session.status"]
    assert reply.status_code == 200
    assert "error" not in reply.json()["info"]
    assert assistant_text(reply.json()) == "Echo: FAIL:retry:2 then answer"
    retries = [s for s in statuses if s["type"] == "retry"]
    assert [s["attempt"] for s in retries] == [1, 2]
    assert all(s["message"] and s["next"] > 0 for s in retries)
    assert statuses[-1] == {"type": "idle"}


def test_fatal_failure_ends_the_turn_with_an_api_error(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        reply = client.post(f"/session/{sid}/message", json=text_prompt("FAIL:fatal")).json()
        events.wait_idle(sid)
        errors = [f.properties for f in events.of_session(sid) if f.type == "session.error"]
    assert reply["info"]["error"]["name"] == "APIError"
    assert reply["info"]["error"]["data"]["isRetryable"] is False
    assert reply["info"]["error"]["data"]["statusCode"] == 400
    assert errors and errors[0]["error"]["name"] == "APIError"
    assert "completed" in reply["info"]["time"]
    assert client.get("/session/status").json() == {}


def test_a_slow_models_reply_shows_begun_before_its_first_token(server: ThreadServer, client: httpx.Client) -> None:
    """The step's opening waits for the model's first token only for a moment: a model that takes
    longer still has its reply begun (message and step-start stored and announced), and an abort
    before any token closes that reply as aborted."""
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        events.wait_for(lambda f: f.type == "server.connected")
        assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:60 take a minute")).status_code == 204
        opened = events.wait_for(
            lambda f: f.type == "message.part.updated" and f.properties["part"]["type"] == "step-start", timeout=20
        )
        history = client.get(f"/session/{sid}/message").json()
        assert [m["info"]["role"] for m in history] == ["user", "assistant"]
        assert [p["type"] for p in history[1]["parts"]] == ["step-start"]
        assert history[1]["info"]["id"] == opened.properties["part"]["messageID"]
        assert client.post(f"/session/{sid}/abort").json() is True
        events.wait_idle(sid)
    reply = client.get(f"/session/{sid}/message").json()[1]
    assert reply["info"]["error"]["name"] == "MessageAbortedError" and "completed" in reply["info"]["time"]


def test_an_abort_before_the_reply_is_begun_leaves_it_aborted(settings: Settings) -> None:
    """Aborted while its opening still waits for the model's first token (a grace longer than
    the test): the opening is made with the abort, so the prompt has its reply, marked aborted,
    and is not answered again."""
    settings = settings.model_copy(update={"step_opening_grace_seconds": 60.0})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        with EventCollector(f"{server.url}/event") as events:
            events.wait_for(lambda f: f.type == "server.connected")
            assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:60 never")).status_code == 204
            events.wait_for(lambda f: f.type == "session.status" and f.properties["sessionID"] == sid)
            assert client.get(f"/session/{sid}/message").json()[-1]["info"]["role"] == "user"  # not begun yet
            assert client.post(f"/session/{sid}/abort").json() is True
            events.wait_idle(sid)
        history = client.get(f"/session/{sid}/message").json()
        assert [m["info"]["role"] for m in history] == ["user", "assistant"]
        assert history[1]["info"]["error"]["name"] == "MessageAbortedError"
        assert [p["type"] for p in history[1]["parts"]] == ["step-start"]
        assert client.get("/session/status").json() == {}


def test_a_prompt_aborted_as_soon_as_it_is_accepted_gets_an_aborted_reply(
    server: ThreadServer, client: httpx.Client
) -> None:
    """An abort right after the 204, before the drain has begun the prompt's step, still gives
    the prompt its reply, marked aborted (as OpenCode, which makes the reply first), and the
    session takes the next prompt as usual."""
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        events.wait_for(lambda f: f.type == "server.connected")
        for _ in range(3):
            assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:60 never")).status_code == 204
            assert client.post(f"/session/{sid}/abort").json() is True
            events.wait_idle(sid)
    history = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["role"] for m in history] == ["user", "assistant"] * 3
    for prompt, reply in zip(history[::2], history[1::2], strict=True):
        assert reply["info"]["parentID"] == prompt["info"]["id"]
        assert reply["info"]["error"]["name"] == "MessageAbortedError"
        assert "completed" in reply["info"]["time"]
    assert assistant_text(client.post(f"/session/{sid}/message", json=text_prompt("after")).json()) == "Echo: after"
