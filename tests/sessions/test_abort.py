"""Abort: the partial reply is kept and marked aborted; the session goes idle."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import httpx
import pytest

from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector


def test_abort_keeps_partial_text_and_marks_the_reply(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    result: dict[str, httpx.Response] = {}
    with EventCollector(f"{server.url}/event") as events:
        waiter = threading.Thread(
            target=lambda: result.setdefault(
                "reply", client.post(f"/session/{sid}/message", json=text_prompt("SLOW:0.4 take your time"))
            )
        )
        waiter.start()
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid)
        assert client.get("/session/status").json() == {sid: {"type": "busy"}}
        assert client.post(f"/session/{sid}/abort").json() is True
        waiter.join(timeout=10)
        events.wait_idle(sid)
        errors = [f.properties["error"] for f in events.of_session(sid) if f.type == "session.error"]
    reply = result["reply"]
    assert reply.status_code == 200
    body = reply.json()
    assert body["info"]["error"] == {"name": "MessageAbortedError", "data": {"message": "Aborted"}}
    assert "completed" in body["info"]["time"]
    partial = assistant_text(body)
    assert (
        partial and "Echo: SLOW:0.4 take your time".startswith(partial) and partial != "Echo: SLOW:0.4 take your time"
    )
    text_part = next(p for p in body["parts"] if p["type"] == "text")
    assert "end" in text_part["time"]
    assert errors == [{"name": "MessageAbortedError", "data": {"message": "Aborted"}}]
    assert client.get("/session/status").json() == {}
    stored = client.get(f"/session/{sid}/message").json()[-1]
    assert stored["info"]["error"]["name"] == "MessageAbortedError"
    assert assistant_text(stored) == partial


def test_abort_when_idle_or_missing_is_true(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        assert client.post(f"/session/{sid}/abort").json() is True
        events.wait_idle(sid)
    assert client.post("/session/ses_000000000000000000000000000/abort").json() is True


def test_abort_stops_prompts_queued_behind_the_turn(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 first"))
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("second"))
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid)
        client.post(f"/session/{sid}/abort")
        events.wait_idle(sid)
    history = client.get(f"/session/{sid}/message").json()
    assert sorted(m["info"]["role"] for m in history) == ["assistant", "user", "user"]
    # The next prompt is answered, and only it: the aborted busy period does not resume.
    reply = client.post(f"/session/{sid}/message", json=text_prompt("third")).json()
    assert assistant_text(reply) == "Echo: third"
    assert len(client.get(f"/session/{sid}/message").json()) == 5


def test_a_v2_prompt_waiting_behind_an_aborted_turn_stays_admitted_for_the_next_turn(
    server: ThreadServer, client: httpx.Client
) -> None:
    """A V2 prompt that waits behind the turn is not in the history yet. A legacy abort must not
    drop it (it was answered 200 and would vanish without a trace): it stays parked, as OpenCode's
    interrupt leaves it, and the session's next turn takes it in."""
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 first"))
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid)
        parked = client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": "parked"}, "delivery": "queue"})
        assert parked.status_code == 200
        client.post(f"/session/{sid}/abort")
        events.wait_idle(sid)
    texts = [p.get("text") for m in client.get(f"/session/{sid}/message").json() for p in m["parts"]]
    assert "parked" not in texts  # not taken into a turn, and not answered after the abort
    client.post(f"/session/{sid}/message", json=text_prompt("next"))
    history = client.get(f"/session/{sid}/message").json()
    users = {m["info"]["id"]: m["parts"][0].get("text") for m in history if m["info"]["role"] == "user"}
    assert sorted(users.values()) == ["SLOW:0.3 first", "next", "parked"]
    assert parked.json()["data"]["id"] in users
    answered = [
        users[m["info"]["parentID"]] for m in history if m["info"]["role"] == "assistant" and "error" not in m["info"]
    ]
    assert answered == ["parked", "next"]  # each in its turn, oldest first (both queued)


def _answered(client: httpx.Client, sid: str, user_id: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = client.get(f"/session/{sid}/message").json()
        if any(m["info"].get("parentID") == user_id and "error" not in m["info"] for m in history):
            return True
        time.sleep(0.05)
    return False


def test_a_prompt_admitted_while_an_abort_settles_is_answered(server: ThreadServer, client: httpx.Client) -> None:
    """Abort drops the prompts queued before it; one whose admission comes after the aborted reply
    was closed got its 204 from a busy period that is ending, and must still be answered."""
    late = 0
    with EventCollector(f"{server.url}/event") as events:
        for _ in range(25):
            sid = create_session(client)["id"]
            client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 first"))
            events.wait_for(lambda f, sid=sid: f.type == "message.part.delta" and f.properties["sessionID"] == sid)  # type: ignore[misc]

            async def race(sid: str = sid) -> None:
                async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

                    async def prompt() -> None:
                        await asyncio.sleep(random.uniform(0, 0.004))
                        answer = await http.post(f"/session/{sid}/prompt_async", json=text_prompt("after"))
                        assert answer.status_code == 204

                    await asyncio.gather(http.post(f"/session/{sid}/abort"), prompt())

            asyncio.run(race())
            events.wait_idle(sid)
            frames = events.of_session(sid)
            closed = next(
                i
                for i, f in enumerate(frames)
                if f.type == "message.updated" and (f.properties["info"].get("error") or {}).get("name")
            )
            after = next(
                (
                    f.properties["info"]["id"]
                    for f in frames[closed:]
                    if f.type == "message.updated" and f.properties["info"]["role"] == "user"
                ),
                None,
            )
            if after is not None:  # admitted once the abort had closed the turn
                late += 1
                assert _answered(client, sid, after), "a prompt that got its 204 was dropped"
    assert late, "the race never admitted a prompt after the aborted reply closed"


async def test_a_race_runs_in_its_task_and_firing_cancels_only_what_races() -> None:
    """A race awaits in the calling task: one whose awaitable is ready costs no pass of the event
    loop (the provider stream is raced once per event). Firing the signal turns the wait of every
    task racing into Aborted and cancels the awaitable; the tasks are left with no cancellation
    pending, and a cancellation from elsewhere stays a cancellation."""
    from app.runtime.abort import Aborted, AbortSignal

    signal = AbortSignal()
    passes = 0

    async def bystander() -> None:
        nonlocal passes
        while True:
            passes += 1
            await asyncio.sleep(0)

    async def ready() -> int:
        return 42

    counting = asyncio.create_task(bystander())
    await asyncio.sleep(0)
    before = passes
    assert [await signal.race(ready()) for _ in range(20)] == [42] * 20
    assert passes == before, "a race of a ready awaitable let the loop run"

    stream_closed = asyncio.Event()

    async def stream() -> None:
        try:
            await asyncio.Event().wait()  # a provider that never answers
        finally:
            stream_closed.set()

    async def racer() -> int:
        with pytest.raises(Aborted):
            await signal.race(stream())
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    racers = [asyncio.create_task(racer()) for _ in range(3)]
    elsewhere = asyncio.create_task(signal.race(asyncio.Event().wait()))
    await asyncio.sleep(0)
    elsewhere.cancel()  # cancelled by its owner before the signal fires
    await asyncio.sleep(0)
    signal.fire("abort")
    assert await asyncio.wait_for(asyncio.gather(*racers), 5) == [0, 0, 0]
    assert stream_closed.is_set()
    with pytest.raises(asyncio.CancelledError):
        await elsewhere
    with pytest.raises(Aborted):
        await signal.race(ready())  # fired: nothing more is awaited
    counting.cancel()
