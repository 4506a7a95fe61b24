"""A revert under way on a process that gives its session up before the revert is recorded: two
runtimes (two processes' worth of state) on one PostgreSQL database, the first paused while it
moves the files. A stopping process lets the revert end before it hands the session off; one
that has lost the session anyway (held up past the wait, or cut off past its lease) records
nothing: the process that took the session over finished the revert, and a prompt may since
have committed it. Found by ``bench/chaos.py``: the stale revert staged the marker again after
the next prompt had committed it, and a later unrevert restored the old turn's file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import cast

import pytest

import app.runtime.sessions._coordinator as coordinator_module
from app.runtime.errors import SessionBusy
from app.runtime.history._journal import Journal, pending
from app.runtime.inputs import PromptRequest
from app.runtime.service import Runtime
from app.runtime.sessions._cluster import ClusterTopology
from app.settings import Settings
from app.wire import Session
from tests.helpers import git_repository
from tests.servers import free_port

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def _prompt(text: str) -> PromptRequest:
    return PromptRequest(parts=[{"type": "text", "text": text}])


@pytest.fixture
def lease_seconds() -> float:
    return Settings.model_fields["lease_seconds"].default


@pytest.fixture
async def pair(settings: Settings, project_dir: Path, lease_seconds: float) -> AsyncIterator[tuple[Runtime, Runtime]]:
    git_repository(project_dir)
    settings = settings.model_copy(update={"lease_seconds": lease_seconds})
    first = Runtime(settings)
    second = Runtime(settings.model_copy(update={"port": free_port()}))
    await first.start()
    await second.start()
    try:
        yield first, second
    finally:
        await second.stop()
        await first.stop()


class _PausedAfterRestore:
    """Holds the first runtime's revert once it has moved the files, before it records the
    outcome (at the snapshot it then takes), as a busy machine would."""

    def __init__(self, runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached, self.go = asyncio.Event(), asyncio.Event()
        restore, track = runtime.files.restore, runtime.files.track
        restored = False

        async def restoring(directory: str, changes: Mapping[str, str], time_left: Callable[[], float]) -> None:
            nonlocal restored
            await restore(directory, changes, time_left)
            restored = True

        async def tracking(directory: str) -> str | None:
            if restored:
                self.reached.set()
                await self.go.wait()
            return await track(directory)

        monkeypatch.setattr(runtime.files, "restore", restoring)
        monkeypatch.setattr(runtime.files, "track", tracking)


async def _turn_writing(runtime: Runtime, sid: str, text: str) -> str:
    """Run a turn whose tool writes ``text`` to ``undo.txt``; returns its user message id."""
    await runtime.prompting.prompt_and_wait(sid, _prompt(f"TOOL:bash echo {text} > undo.txt"))
    users = [m["info"]["id"] for m in await runtime.history.get_messages(sid) if m["info"]["role"] == "user"]
    return users[-1]


async def _reverting(
    first: Runtime, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str, _PausedAfterRestore, asyncio.Task[Session]]:
    """A session whose turn wrote ``undo.txt``, and the first runtime's revert of that turn, held
    once the file is gone: the session, the turn's user message, the pause and the revert."""
    sid = (await first.sessions.create(str(project_dir)))["id"]
    user = await _turn_writing(first, sid, "one")
    paused = _PausedAfterRestore(first, monkeypatch)
    reverting = asyncio.create_task(first.reverts.stage(sid, user))
    await paused.reached.wait()
    assert not (project_dir / "undo.txt").exists()
    return sid, user, paused, reverting


async def _resumes_after_the_taker(
    taker: Runtime, sid: str, go: asyncio.Event, reverting: asyncio.Task[Session], project_dir: Path
) -> None:
    """``taker`` finishes the revert and runs a turn that writes ``undo.txt`` again; then the
    first process's revert resumes (``go``): it must end refused and leave the file alone."""
    await _finished_by(taker, sid)
    await _turn_writing(taker, sid, "two")
    go.set()
    with pytest.raises(SessionBusy):
        await reverting
    assert (project_dir / "undo.txt").read_text() == "two\n"
    assert "revert" not in await taker.sessions.get(sid)


async def _finished_by(taker: Runtime, sid: str) -> None:
    """Until ``taker`` has taken the session over (woken by the hand-off) and finished the revert
    the other left under way."""
    async with asyncio.timeout(15):
        while await pending(taker.db, sid) is not None or "revert" not in await taker.sessions.get(sid):
            await asyncio.sleep(0.05)


async def test_a_stopping_process_lets_the_revert_under_way_end_before_it_hands_off(
    pair: tuple[Runtime, Runtime], project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = pair
    sid, user, paused, reverting = await _reverting(first, project_dir, monkeypatch)
    handing_off = asyncio.create_task(first.hand_off())
    await asyncio.sleep(0.5)
    assert not handing_off.done()  # it waits for the revert
    with pytest.raises(SessionBusy):  # the session is still the first's
        async with second.history.still(sid):
            pass
    paused.go.set()
    info = await reverting
    await handing_off
    assert info["revert"]["messageID"] == user
    assert not (project_dir / "undo.txt").exists()
    assert (await second.sessions.get(sid))["revert"]["messageID"] == user


async def test_a_revert_whose_session_was_taken_over_meanwhile_records_nothing(
    pair: tuple[Runtime, Runtime], project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = pair
    sid, user, paused, reverting = await _reverting(first, project_dir, monkeypatch)
    monkeypatch.setattr(coordinator_module, "HOLDS_END_WITHIN_S", 0.0)
    await first.hand_off()  # the session is given up with the revert under way
    await _finished_by(second, sid)
    assert (await second.sessions.get(sid))["revert"]["messageID"] == user
    assert not (project_dir / "undo.txt").exists()
    await _turn_writing(second, sid, "two")  # commits the revert, and writes the file again
    paused.go.set()
    with pytest.raises(SessionBusy):
        await reverting
    session = await second.sessions.get(sid)
    assert "revert" not in session, session["revert"]  # not staged again over the committed one
    assert (project_dir / "undo.txt").read_text() == "two\n"
    texts = [p["text"] for m in await second.history.get_messages(sid) for p in m["parts"] if p["type"] == "text"]
    assert texts[0] == "TOOL:bash echo two > undo.txt"


async def test_a_revert_handed_off_before_it_moves_the_files_moves_none(
    pair: tuple[Runtime, Runtime], project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held up between recording the revert and moving its files, past the hand-off: the files
    are left to the process that took the session over, and to the turn that ran there since."""
    first, second = pair
    sid = (await first.sessions.create(str(project_dir)))["id"]
    user = await _turn_writing(first, sid, "one")
    reached, go = asyncio.Event(), asyncio.Event()
    finish = first.reverts._finish

    async def held_up(session: Session, journal: Journal) -> Session:
        reached.set()
        await go.wait()
        return await finish(session, journal)

    monkeypatch.setattr(first.reverts, "_finish", held_up)
    reverting = asyncio.create_task(first.reverts.stage(sid, user))
    await reached.wait()
    assert (project_dir / "undo.txt").read_text() == "one\n"  # nothing moved yet
    monkeypatch.setattr(coordinator_module, "HOLDS_END_WITHIN_S", 0.0)
    await first.hand_off()
    await _resumes_after_the_taker(second, sid, go, reverting, project_dir)


@pytest.mark.parametrize("lease_seconds", [2.0])
async def test_a_revert_that_stalls_before_its_files_move_moves_none_once_its_lease_may_have_run_out(
    pair: tuple[Runtime, Runtime], project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process checks its lease, then stalls (frozen, swapped out) past the lease
    before its restore begins: meanwhile the second takes the session over, finishes the revert
    and runs a turn that writes the file again. Its restore, when it resumes, finds by its own
    clock that the lease may have run out and moves nothing (it used to delete the new file)."""
    first, second = pair
    sid = (await first.sessions.create(str(project_dir)))["id"]
    user = await _turn_writing(first, sid, "one")
    reached, go = asyncio.Event(), asyncio.Event()
    restore = first.files.restore

    async def stalling(directory: str, changes: Mapping[str, str], time_left: Callable[[], float]) -> None:
        reached.set()
        await go.wait()
        await restore(directory, changes, time_left)

    monkeypatch.setattr(first.files, "restore", stalling)
    reverting = asyncio.create_task(first.reverts.stage(sid, user))
    await reached.wait()
    await cast(ClusterTopology, first.coordinator._claims)._end_watchdog()  # frozen: no more renewals
    await _resumes_after_the_taker(second, sid, go, reverting, project_dir)
