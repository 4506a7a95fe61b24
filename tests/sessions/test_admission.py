"""Admission below the HTTP layer: a runtime on a real database, no server. A prompt is durable
(its input row, its user message and their events) when ``admit`` returns; a retried id with the
same content is the same admission, with other content a conflict; ``noReply`` is stored but
never answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import asyncpg
import pytest

from app.runtime.errors import Conflict
from app.runtime.inputs import PromptRequest
from app.runtime.service import Runtime


def _text(text: str, message_id: str | None = None, *, no_reply: bool = False) -> PromptRequest:
    return PromptRequest(parts=[{"type": "text", "text": text}], message_id=message_id, no_reply=no_reply)


async def _session(runtime: Runtime) -> str:
    session = await runtime.sessions.create(runtime.settings.directory)
    return str(session["id"])


async def test_an_admitted_prompt_is_stored_with_its_message_before_admit_returns(runtime: Runtime) -> None:
    sid = await _session(runtime)
    admitted = await runtime.admission.admit(sid, _text("hello", "msg_a1"))
    assert admitted.created and admitted.record.id == "msg_a1"
    unsettled = await runtime.infra.queries.unsettled_inputs(sid)
    assert [row.id for row in unsettled] == ["msg_a1"]
    messages = await runtime.history.get_messages(sid)
    assert [m["info"]["id"] for m in messages] == ["msg_a1"]
    first = messages[0]["parts"][0]
    assert first["type"] == "text" and first["text"] == "hello"


async def test_a_retried_id_is_the_same_admission_and_other_content_conflicts(runtime: Runtime) -> None:
    sid = await _session(runtime)
    await runtime.admission.admit(sid, _text("hello", "msg_r1"))
    again = await runtime.admission.admit(sid, _text("hello", "msg_r1"))
    assert not again.created
    with pytest.raises(Conflict):
        await runtime.admission.admit(sid, _text("something else", "msg_r1"))
    assert [row.id for row in await runtime.infra.queries.unsettled_inputs(sid)] == ["msg_r1"]
    assert len(await runtime.history.get_messages(sid)) == 1


async def test_no_reply_is_stored_but_never_waits_to_be_answered(runtime: Runtime) -> None:
    sid = await _session(runtime)
    await runtime.admission.admit(sid, _text("just a note", "msg_n1", no_reply=True))
    assert await runtime.infra.queries.unsettled_inputs(sid) == []
    assert [m["info"]["id"] for m in await runtime.history.get_messages(sid)] == ["msg_n1"]


COUNTED: ContextVar[bool] = ContextVar("counted", default=False)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_an_admission_on_postgresql_is_two_round_trips(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write head (the session's hold, its info and revert journal, read together) and the
    script that writes and commits: nothing else is read on the way (``noReply``: no drain)."""
    sid = await _session(runtime)
    await runtime.admission.admit(sid, _text("warm", no_reply=True))  # the connection is begun, statements prepared
    calls: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(asyncpg.Connection, name)

        async def call(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            if COUNTED.get():  # the admission's task, or one it started (its commit)
                calls.append(query.split("\n", 1)[0][:80])
            return await original(self, query, *args, **kwargs)

        return call

    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        monkeypatch.setattr(asyncpg.Connection, name, counted(name))
    COUNTED.set(True)
    await runtime.admission.admit(sid, _text("counted", no_reply=True))
    assert len(calls) == 2, calls


async def test_a_prompt_admitted_while_the_drain_runs_with_nothing_to_answer_commits_the_staged_revert(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain can be running with nothing to answer (woken by a takeover, or in its pass after a
    turn) while a revert is staged. A prompt admitted then is that drain's next turn: it must
    commit the revert first, or the turn continues from the reverted messages and a later revert
    takes the old revert's files for the state to come back to (seen with several processes)."""
    sid = await _session(runtime)
    await runtime.prompting.prompt_and_wait(sid, _text("one", "msg_one"))
    await runtime.reverts.stage(sid, "msg_one")
    read_work, release = runtime.infra.queries.step_work, asyncio.Event()

    async def step_work_after_release(session_id: str) -> Any:
        await release.wait()
        return await read_work(session_id)

    monkeypatch.setattr(runtime.infra.queries, "step_work", step_work_after_release)
    runtime.coordinator.wake(sid)  # a pass that will find nothing but what is admitted meanwhile
    assert runtime.coordinator.is_active(sid)
    answering = asyncio.create_task(runtime.prompting.prompt_and_wait(sid, _text("two")))
    while not await runtime.infra.queries.unsettled_inputs(sid):
        await asyncio.sleep(0.01)
    release.set()
    await asyncio.wait_for(answering, 30)
    assert "revert" not in await runtime.sessions.get(sid)
    texts = [p.get("text") for m in await runtime.history.get_messages(sid) for p in m["parts"] if p["type"] == "text"]
    assert texts == ["two", "Echo: two"]
