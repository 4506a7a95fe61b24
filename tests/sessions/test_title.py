"""A session's title is stored with the end of the step it was made beside, when it is ready by
then (a turn of a model that answers at once is three commits, not four); one ready later is
stored at once, and one whose step streams on is stored after ``RIDE_S`` without waiting for it.
A step's end that took the title but did not commit leaves it to a transaction of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.events.log import EventLog
from app.providers.registry import ModelRef
from app.runtime.inputs import PromptRequest
from app.runtime.service import Runtime
from app.runtime.turn import _title
from app.runtime.turn._title import TitleGenerator
from tests.helpers import count_commits

STEP_END = "session.next.step.ended"


def _prompt(text: str) -> PromptRequest:
    return PromptRequest(parts=[{"type": "text", "text": text}])


async def _session(runtime: Runtime) -> str:
    return str((await runtime.sessions.create(runtime.settings.directory))["id"])


async def _title_of(runtime: Runtime, sid: str) -> str:
    return str((await runtime.sessions.get(sid))["title"])


async def _until_titled(runtime: Runtime, sid: str, default: str) -> str:
    async with asyncio.timeout(10):
        while (title := await _title_of(runtime, sid)) == default:
            await asyncio.sleep(0.01)
    return title


def _answers_with(monkeypatch: pytest.MonkeyPatch, title: str, release: asyncio.Event | None = None) -> None:
    """The title model answers ``title`` (once ``release`` is set, if given)."""

    async def ask(self: TitleGenerator, *args: Any) -> str:
        if release is not None:
            await release.wait()
        return title

    monkeypatch.setattr(TitleGenerator, "_ask", ask)


def _only_session_updates(committed: list[list[str]]) -> list[list[str]]:
    return [types for types in committed if types and set(types) == {"session.updated"}]


async def test_a_title_ready_before_its_step_ends_is_stored_with_that_end(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await _session(runtime)
    default = await _title_of(runtime, sid)
    committed = count_commits(runtime.infra.log, monkeypatch)
    await runtime.prompting.prompt_and_wait(sid, _prompt("name this session"))
    assert await _title_of(runtime, sid) == "name this session"  # the echo model's title
    assert default != "name this session"
    await runtime.prompting.wait_idle(sid)
    ends = [types for types in committed if STEP_END in types]
    assert len(ends) == 1 and "session.updated" in ends[0]
    assert _only_session_updates(committed) == []  # no commit of the title alone
    assert len([types for types in committed if types]) == 3  # admission, opening, end


async def test_a_title_ready_after_its_step_ended_is_stored_at_once(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_title, "RIDE_S", 3600.0)  # waiting for a step's end would never end here
    release = asyncio.Event()
    _answers_with(monkeypatch, "late title", release)
    sid = await _session(runtime)
    default = await _title_of(runtime, sid)
    committed = count_commits(runtime.infra.log, monkeypatch)
    await runtime.prompting.prompt_and_wait(sid, _prompt("a quick one"))
    assert await _title_of(runtime, sid) == default
    release.set()
    assert await _until_titled(runtime, sid, default) == "late title"
    assert _only_session_updates(committed) == [["session.updated"]]


async def test_a_title_ready_while_its_step_streams_on_waits_for_the_end_only_so_long(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_title, "RIDE_S", 0.05)
    _answers_with(monkeypatch, "early title")
    sid = await _session(runtime)
    default = await _title_of(runtime, sid)
    await runtime.prompting.prompt(sid, _prompt("SLOW:0.5 a slow answer"))
    assert await _until_titled(runtime, sid, default) == "early title"
    events = await runtime.infra.log.session_since(sid, -1)
    assert STEP_END not in [e.type for e in events]  # stored while the step still streamed
    await runtime.prompting.wait_idle(sid)


async def test_a_title_taken_by_a_step_end_that_did_not_commit_is_stored_alone(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's end fails after taking the title (here: it raises before its commit)."""
    monkeypatch.setattr(_title, "RIDE_S", 3600.0)
    release = asyncio.Event()
    _answers_with(monkeypatch, "kept title", release)
    titles = runtime.turn.titles
    sid = await _session(runtime)
    default = await _title_of(runtime, sid)
    titles.schedule(await runtime.sessions.get(sid), "anything", ModelRef("opensession", "echo"))
    release.set()
    await asyncio.sleep(0.05)  # the title is ready, waiting for the step's end
    log: EventLog = runtime.infra.log
    with pytest.raises(RuntimeError):
        async with log.transaction(hold=sid) as tx:
            assert titles.with_step_end(tx.scope, sid) is not None
            raise RuntimeError("the step's end failed")
    assert await _until_titled(runtime, sid, default) == "kept title"
