"""The step pacer: steps wait for a slot while the event loop lags, in arrival order, and no slot
is lost to a cancelled or aborted waiter; on a loop that keeps up nothing is held back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.runtime.abort import Aborted, AbortSignal
from app.runtime.turn._pacing import MIN_STEPS, Slot, StepPacer
from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import StubReply, ThreadServer, openai_stub
from tests.sse import EventCollector

LAGGING = 1.0  # seconds: any measured lag above the target
HELD = 4 * MIN_STEPS  # slots held when the loop starts to lag


async def _waiter(pacer: StepPacer, order: list[int], index: int) -> Slot:
    slot = await pacer.acquire()
    order.append(index)
    return slot


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_lagging_loop_holds_new_steps_back_and_starts_them_in_order() -> None:
    pacer = StepPacer(tick=3600)  # its own ticker never comes round: the test plays the ticks
    pacer.limit = HELD
    held = [await pacer.acquire() for _ in range(HELD)]
    for _ in range(20):
        pacer.adjust(LAGGING)
    assert pacer.limit == MIN_STEPS
    order: list[int] = []
    waiting = [asyncio.create_task(_waiter(pacer, order, i)) for i in range(3)]
    await _settle()
    assert order == [] and pacer.in_flight == HELD

    # Releasing down to the limit grants nothing; each release below it grants the oldest waiter.
    for slot in held[: HELD - MIN_STEPS]:
        slot.release()
    await _settle()
    assert order == []
    held[HELD - MIN_STEPS].release()
    held[HELD - MIN_STEPS].release()  # idempotent: a second release frees nothing more
    await _settle()
    assert order == [0] and pacer.in_flight == MIN_STEPS

    # Each timely tick with steps waiting raises the limit, by at least one step.
    for started in (2, 3):
        pacer.adjust(0.0)
        await _settle()
        assert order == list(range(started))
    assert pacer.limit > MIN_STEPS + 1
    for slot in [*held[HELD - MIN_STEPS + 1 :], *(await asyncio.gather(*waiting))]:
        slot.release()
    assert pacer.in_flight == 0
    await pacer.stop()


async def test_cancelled_waiters_lose_no_slot() -> None:
    pacer = StepPacer(tick=3600)
    pacer.limit = 1
    first = await pacer.acquire()
    cancelled_early = asyncio.create_task(pacer.acquire())
    granted_then_cancelled = asyncio.create_task(pacer.acquire())
    last = asyncio.create_task(pacer.acquire())
    await _settle()
    cancelled_early.cancel()
    await _settle()

    # The slot goes to the next live waiter; cancelled before it resumed, it hands the slot on.
    first.release()
    assert pacer.in_flight == 1
    granted_then_cancelled.cancel()
    await _settle()
    assert last.done() and pacer.in_flight == 1
    (await last).release()
    assert pacer.in_flight == 0
    for task in (cancelled_early, granted_then_cancelled):
        with pytest.raises(asyncio.CancelledError):
            await task
    await pacer.stop()


async def test_an_abort_while_waiting_for_a_slot_ends_the_wait() -> None:
    """A drain aborted before its step started gets ``Aborted`` at once and takes no slot."""
    pacer = StepPacer(tick=3600)
    held = [await pacer.acquire() for _ in range(MIN_STEPS)]
    signal = AbortSignal()
    waiting = asyncio.create_task(signal.race(pacer.acquire()))
    await _settle()
    signal.fire()
    with pytest.raises(Aborted):
        await waiting
    held[0].release()  # the aborted waiter is skipped: nothing is granted to it
    assert pacer.in_flight == MIN_STEPS - 1
    for slot in held[1:]:
        slot.release()
    assert pacer.in_flight == 0
    await pacer.stop()


async def test_a_loop_that_keeps_up_starts_every_waiting_step() -> None:
    """Steps that wait on the network hold their slots; with the loop idle the limit grows until
    every one of them is streaming at once."""
    pacer = StepPacer(tick=0.002)
    steps = 50
    all_started = asyncio.Event()
    started = 0
    limit_then = 0.0

    async def step() -> None:
        nonlocal started, limit_then
        slot = await pacer.acquire()
        started += 1
        if started == steps:
            limit_then = pacer.limit  # read at once: an idle loop shrinks it again afterwards
            all_started.set()
        await all_started.wait()  # "streaming": holds the slot until every step has one
        slot.release()

    await asyncio.wait_for(asyncio.gather(*(step() for _ in range(steps))), 30)
    assert pacer.in_flight == 0 and limit_then >= steps

    # Idle again: the next burst starts small.
    async def idle() -> None:
        while pacer._ticker is not None:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(idle(), 30)
    assert pacer.limit == MIN_STEPS


async def test_the_ticker_measures_a_blocked_loop_as_lag() -> None:
    pacer = StepPacer(tick=0.001)
    pacer.limit = HELD
    slots = [await pacer.acquire() for _ in range(MIN_STEPS + 1)]  # above the floor: measured
    await asyncio.sleep(0)  # the ticker starts and sleeps
    for _ in range(40):
        time.sleep(0.02)  # a saturated loop: each iteration far longer than the target lag
        await asyncio.sleep(0.002)
    assert pacer.limit < HELD
    for slot in slots:
        slot.release()
    await pacer.stop()


async def test_a_few_steps_run_unwatched() -> None:
    """Up to the floor, steps start at once and no ticker runs, however long they take."""
    pacer = StepPacer()
    slots = [await pacer.acquire() for _ in range(MIN_STEPS)]
    await asyncio.sleep(0)
    assert pacer._ticker is None and pacer.in_flight == MIN_STEPS
    extra = await asyncio.wait_for(pacer.acquire(), 30)  # one more waits for a tick, then starts
    assert pacer._ticker is not None
    for slot in [*slots, extra]:
        slot.release()
    await pacer.stop()


def test_turns_waiting_on_a_slow_model_all_stream_at_once(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """Many more sessions than a burst's first limit, each waiting on a model that answers only
    once every one of them has asked: the loop stays idle meanwhile, so none is held back."""
    sessions = 12 * MIN_STEPS
    everyone = threading.Barrier(sessions, timeout=30)

    def reply(body: dict[str, Any]) -> StubReply:
        if "title generator" in json.dumps(body["messages"][:1]):
            return StubReply(content=["A title"])
        try:
            everyone.wait()
        except threading.BrokenBarrierError:
            return StubReply(content=["alone"])
        return StubReply(content=["together"])

    with openai_stub(reply, keep_alive=True) as stub:
        provider = {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": stub.url}, "models": {"m": {}}}
        (project_dir / "opencode.json").write_text(json.dumps({"model": "stub/m", "provider": {"stub": provider}}))
        ids = [create_session(client)["id"] for _ in range(sessions)]
        with EventCollector(f"{server.url}/event") as events:
            for sid in ids:
                assert client.post(f"/session/{sid}/prompt_async", json=text_prompt("hello")).status_code == 204
            for sid in ids:
                events.wait_for(lambda f, sid=sid: f.type == "session.idle" and f.properties["sessionID"] == sid, 60)  # type: ignore[misc]
    for sid in ids:
        replies = [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "assistant"]
        assert [assistant_text(m) for m in replies] == ["together"]
