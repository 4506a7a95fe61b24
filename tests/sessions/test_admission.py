"""Admission below the HTTP layer: a runtime on a real database, no server. A prompt is durable
(its input row, its user message and their events) when ``admit`` returns; a retried id with the
same content is the same admission, with other content a conflict; ``noReply`` is stored but
never answered."""

from __future__ import annotations

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
