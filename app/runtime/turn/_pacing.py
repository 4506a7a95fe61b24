"""Pacing model steps by the event loop's lag: while the loop is saturated, steps that have not
started wait, so the work already in flight finishes first.

Why: with an instant model (or many fast ones) every drain is runnable at once, and each loop
iteration runs all of them. An admission a client is waiting on, or a delta on its way to the
subscribers, takes a few iterations, and every iteration then takes as long as all that work
together. The total work is the same in any order, so starting fewer steps at once while the loop
lags shortens every iteration without lowering throughput (figures: bench/README.md, "Pacing
steps").

How: a step holds a slot from its start until its model stream ends. Its tools run without one,
so a step never waits for a slot while holding one (a subagent's steps take slots of their own).
While steps wait for a slot, or more than ``MIN_STEPS`` hold one, a ticker measures how late a
short sleep wakes (the length of the iteration it waited behind): a late tick shrinks the limit
by a fifth, down to ``MIN_STEPS``; a timely tick with steps waiting raises it by a quarter.
Waiting steps start in the order they arrived. A burst starts at ``MIN_STEPS`` (the limit goes
back there when the ticker stops), as TCP starts slow: until the ticker has measured, the steps
of a burst are unknown work, and 16 steps let through at once kept the loop saturated through
the first admissions. On a loop that keeps up (real models: steps mostly wait on the network)
the limit grows every tick, so steps started at once on an idle loop soon all hold a slot. The
ticker costs a little CPU while it runs (100 wake-ups a second), so it does not run for a few
steps, however long they stream.
"""

from __future__ import annotations

import asyncio
from collections import deque

TARGET_LAG_S = 0.008  # a tick later than this means the loop is saturated
TICK_S = 0.010
MIN_STEPS = 4  # enough to keep the loop busy while some steps wait on their provider; a burst starts here
MAX_STEPS = 4096
SHRINK = 0.8
GROW = 1.25


class StepPacer:
    """Slots for model steps, limited by the loop's lag. Invariant: ``in_flight`` counts the
    slots granted and not yet released, and a waiter is granted only while ``in_flight`` is below
    the limit, oldest first."""

    def __init__(self, *, target_lag: float = TARGET_LAG_S, tick: float = TICK_S) -> None:
        self.target_lag = target_lag
        self.tick = tick
        self.limit = float(MIN_STEPS)
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._ticker: asyncio.Task[None] | None = None

    async def acquire(self) -> Slot:
        if not self._waiting and self.in_flight < self.limit:
            self.in_flight += 1
            self._watch()
            return Slot(self)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._watch()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted as the waiter was cancelled
                self._release()
            raise  # a cancelled waiter stays queued until _grant skips it
        return Slot(self)

    def _release(self) -> None:
        self.in_flight -= 1
        self._grant()

    def adjust(self, lag: float) -> None:
        """One tick's measurement: how late the loop came back to the ticker."""
        if lag > self.target_lag:
            self.limit = max(MIN_STEPS, self.limit * SHRINK)
        elif self._waiting:
            self.limit = min(MAX_STEPS, max(self.limit * GROW, self.in_flight + 1))
        self._grant()

    def _watched(self) -> bool:
        """Whether the limit matters: steps wait, or more hold a slot than the floor allows."""
        return bool(self._waiting) or self.in_flight > MIN_STEPS

    def _watch(self) -> None:
        if self._ticker is None and self._watched():
            self._ticker = asyncio.create_task(self._measure())

    def _grant(self) -> None:
        while self._waiting and self.in_flight < self.limit:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._watched():
                before = loop.time()
                await asyncio.sleep(self.tick)
                self.adjust(loop.time() - before - self.tick)
            self.limit = float(MIN_STEPS)  # the next burst starts small again
        finally:
            self._ticker = None

    async def stop(self) -> None:
        ticker = self._ticker
        if ticker is not None:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)


class Slot:
    """A granted slot. ``release`` is idempotent: a step gives its slot back when its stream ends
    and again, as a no-op, on its way out whatever happened in between."""

    __slots__ = ("_pacer",)

    def __init__(self, pacer: StepPacer | None) -> None:
        self._pacer = pacer  # None: nothing to give back (a step that never got a slot)

    def release(self) -> None:
        pacer, self._pacer = self._pacer, None
        if pacer is not None:
            pacer._release()
