"""A step's opening (its inputs promoted, its reply begun) goes in the step's first transaction,
or commits alone once the model has kept it waiting for the grace. When the grace runs out while
the step's first transaction already waits for its turn, that transaction makes the opening, and
the one meant to make it alone finds nothing left to write once its turn comes: it sends nothing
to the database (on PostgreSQL it used to read the write head and commit, empty: two round trips
for nothing, in about one turn in five under load)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from app import ids
from app.events.log import Transaction, Unwanted
from app.runtime.service import Runtime
from app.runtime.turn._recorder import AssistantRecorder
from tests.helpers import count_commits


async def _emit(tx: Transaction, session_id: str, event_type: str) -> None:
    await tx.emit(event_type, {"sessionID": session_id}, session_id=session_id, directory=None)


async def _session(runtime: Runtime) -> str:
    return str((await runtime.sessions.create(runtime.settings.directory))["id"])


async def test_a_transaction_no_longer_wanted_when_its_turn_comes_sends_nothing(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = runtime.infra.log
    sid = await _session(runtime)
    wanted = True
    statements: list[str] = []
    waiting: asyncio.Task[None] | None = None

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(asyncpg.Connection, name)

        async def call(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            if asyncio.current_task() is waiting:
                statements.append(query[:80])
            return await original(self, query, *args, **kwargs)

        return call

    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        monkeypatch.setattr(asyncpg.Connection, name, counted(name))

    async def write() -> None:
        async with log.transaction(hold=sid, wanted=lambda: wanted) as tx:
            await _emit(tx, sid, "test.unwanted")

    async with log.transaction(hold=sid):  # holds the session's turn (and SQLite's one writer)
        waiting = asyncio.create_task(write())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        wanted = False
    with pytest.raises(Unwanted):
        await waiting
    assert statements == []
    assert "test.unwanted" not in [e.type for e in await log.session_since(sid, -1)]


async def test_an_opening_made_by_the_step_meanwhile_is_not_committed_again(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace ran out (``open_now``) while the step's first transaction waited for its turn,
    ahead of it: that transaction makes the opening, and nothing else is committed."""
    log = runtime.infra.log
    sid = await _session(runtime)
    topology = runtime.admission.topology
    lease = await topology.claim(sid)
    assert lease is not None
    topology.fence(sid, lease)  # as in a drain: its transactions hold the session, one at a time
    recorder = AssistantRecorder(log, {"id": ids.message_id(), "sessionID": sid}, "", 0.05)  # type: ignore[typeddict-item]

    async def opening(tx: Transaction) -> None:
        await _emit(tx, sid, "test.opened")

    async def step() -> None:
        async with recorder.transaction() as tx:
            await _emit(tx, sid, "test.first_part")

    recorder.open_later(opening, grace=60)
    committed = count_commits(log, monkeypatch)
    async with log.transaction():  # the writes before: the step and the grace's commit wait
        first = asyncio.create_task(step())
        await asyncio.sleep(0.02)
        alone = asyncio.create_task(recorder.open_now())
        await asyncio.sleep(0.02)
    await asyncio.gather(first, alone)
    await recorder.stop_opening()
    assert committed == [[], ["test.opened", "test.first_part"]]
