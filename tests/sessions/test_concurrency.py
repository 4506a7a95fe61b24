"""Many prompts on one session: all admitted before any answer, answered in admission order by
one drain at a time, in a single busy period."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import StubReply, ThreadServer, openai_stub
from tests.sse import EventCollector

PROMPTS = 50


async def _fire(url: str, sid: str) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        responses = await asyncio.gather(
            *(http.post(f"/session/{sid}/prompt_async", json=text_prompt(f"prompt {i}")) for i in range(PROMPTS))
        )
    return [r.status_code for r in responses]


def test_fifty_concurrent_prompts_on_one_session(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        statuses = asyncio.run(_fire(server.url, sid))
        assert statuses == [204] * PROMPTS
        # Every prompt is durable once its 204 is out, whatever the drain is doing.
        users = [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]
        assert len(users) == PROMPTS
        events.wait_for(
            lambda f: (
                f.type == "session.idle"
                and f.properties["sessionID"] == sid
                and len([m for m in client.get(f"/session/{sid}/message").json()]) == 2 * PROMPTS
            ),
            timeout=60,
        )
        status_types = [f.properties["status"]["type"] for f in events.of_session(sid) if f.type == "session.status"]
    history = client.get(f"/session/{sid}/message").json()
    users = [m for m in history if m["info"]["role"] == "user"]
    replies = [m for m in history if m["info"]["role"] == "assistant"]
    assert len(replies) == PROMPTS
    # Answered in the order admitted: reply i answers user i and echoes its text.
    for user, reply in zip(users, replies, strict=True):
        assert reply["info"]["parentID"] == user["info"]["id"]
        assert assistant_text(reply) == "Echo: " + user["parts"][0]["text"]
        assert "error" not in reply["info"]
    # Never two turns at once: each reply was completed before the next one was created.
    for earlier, later in itertools.pairwise(replies):
        assert earlier["info"]["time"]["completed"] <= later["info"]["time"]["created"]
    # Prompts that joined the running loop did not start extra drains or busy periods.
    assert server.runtime.coordinator.drains_started <= 2
    assert status_types.count("idle") == server.runtime.coordinator.drains_started
    assert client.get("/session/status").json() == {}


def test_sessions_run_concurrently(server: ThreadServer, client: httpx.Client) -> None:
    first = create_session(client)["id"]
    second = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{first}/prompt_async", json=text_prompt("SLOW:0.3 first"))
        client.post(f"/session/{second}/prompt_async", json=text_prompt("SLOW:0.3 second"))
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == first)
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == second)
        busy = client.get("/session/status").json()
        assert busy == {first: {"type": "busy"}, second: {"type": "busy"}}
        events.wait_idle(first)
        events.wait_idle(second)


async def test_a_buffered_burst_from_the_provider_lets_the_loop_run() -> None:
    """Reading a stream whose events are all buffered never suspends by itself: the turn must let
    the loop run every ``STREAM_EVENTS_PER_PASS`` events, or one session's burst holds up every
    other session's admissions and deltas until it is through."""
    from collections.abc import AsyncIterator

    from app.providers.base import Finish, StreamEvent, TextDelta
    from app.runtime.abort import AbortSignal
    from app.runtime.turn._runner import STREAM_EVENTS_PER_PASS, Runner

    burst = 40 * STREAM_EVENTS_PER_PASS

    class Buffered:
        async def stream(self, _request: object) -> AsyncIterator[StreamEvent]:
            for _ in range(burst):
                yield TextDelta("x")  # no await in between: all of it already read
            yield Finish("stop")

    class Recorder:
        text = ""

        async def delta(self, _kind: str, text: str, new_part: bool = False) -> None:
            self.text += text

    passes = 0

    async def bystander() -> None:
        nonlocal passes
        while True:
            await asyncio.sleep(0)
            passes += 1

    other = asyncio.create_task(bystander())
    await asyncio.sleep(0)
    recorder = Recorder()
    finish, _calls, _parts = await Runner._stream_once(recorder, Buffered(), object(), AbortSignal())  # type: ignore[arg-type]
    other.cancel()
    assert finish.reason == "stop" and recorder.text == "x" * burst
    assert passes >= burst // STREAM_EVENTS_PER_PASS - 1, f"the loop ran {passes} times during a burst of {burst}"


HUGE_REPLY_DELTAS = 15_000


@pytest.mark.slow
def test_a_huge_reply_starves_neither_admissions_nor_other_sessions(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """Admission first, and fairness: while one session streams a huge reply as fast as its model
    sends it, prompts to it and to other sessions are admitted, and the other sessions' turns run
    to their end, all before the huge reply is over."""

    def reply(body: dict[str, Any]) -> StubReply:
        if "title generator" in json.dumps(body["messages"][:1]):
            return StubReply(content=["A title"])
        prompt = json.dumps(body["messages"][-1])
        return StubReply(content=["x"] * HUGE_REPLY_DELTAS) if "huge" in prompt else StubReply(content=["short"])

    with openai_stub(reply, keep_alive=True) as stub:
        provider = {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": stub.url}, "models": {"m": {}}}
        (project_dir / "opencode.json").write_text(json.dumps({"model": "stub/m", "provider": {"stub": provider}}))
        huge = create_session(client)["id"]
        others = [create_session(client)["id"] for _ in range(5)]
        with EventCollector(f"{server.url}/event") as events:
            assert client.post(f"/session/{huge}/prompt_async", json=text_prompt("a huge reply")).status_code == 204
            events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == huge)
            for sid in others:
                assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("a short one")).status_code == 204
            assert client.post(f"/session/{huge}/prompt_async", json=text_prompt("and then")).status_code == 204
            for sid in others:
                events.wait_for(lambda f, sid=sid: f.type == "session.idle" and f.properties["sessionID"] == sid)  # type: ignore[misc]
            assert client.get("/session/status").json().get(huge) == {"type": "busy"}, "the huge reply ended first"
            events.wait_for(lambda f: f.type == "session.idle" and f.properties["sessionID"] == huge, timeout=120)
    replies = [m for m in client.get(f"/session/{huge}/message").json() if m["info"]["role"] == "assistant"]
    assert [len(assistant_text(m)) for m in replies] == [HUGE_REPLY_DELTAS, len("short")]
    for sid in others:
        answers = [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "assistant"]
        assert [assistant_text(m) for m in answers] == ["short"]
