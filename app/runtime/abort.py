"""Cooperative interruption for a drain.

Interrupting never cancels a task in the middle of a database write: the drain races only its
waits (the provider stream, retry back-off) against the signal, and checks it between writes.

A race runs its awaitable in the calling task, and firing the signal cancels the tasks that are
inside a race at that moment (as ``asyncio.timeout`` does), turning their cancellation into
``Aborted``. Why not a task per race: the provider stream is raced once per event, and a task and
a wait per event put two extra passes of the event loop between a chunk's arrival and its
delta's publication; under load (50 sessions streaming at once) those passes made most of the
delta fan-out latency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


# Why a drain's signal fired, besides a user's ``abort`` and a ``shutdown`` of the process: the
# drain's lease was taken over by another process (its writes are refused: it must not act any more).
LOST = "lost"


class Aborted(Exception):
    """Raised inside a drain once its signal fired; ``reason`` is ``abort``, ``shutdown`` or ``LOST``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AbortSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._racing: set[asyncio.Task[object]] = set()  # tasks awaiting inside ``race`` now
        self._cancelled: set[asyncio.Task[object]] = set()  # those of them the signal cancelled
        self.reason = "abort"
        # Inputs admitted up to this session seq and still waiting behind the interrupted step
        # are settled unanswered (legacy abort); None leaves them for the next wake (V2 interrupt).
        self.settle_through: int | None = None

    @property
    def fired(self) -> bool:
        return self._event.is_set()

    def fire(self, reason: str = "abort", *, settle_through: int | None = None) -> None:
        if self._event.is_set():
            return
        self.reason = reason
        self.settle_through = settle_through
        self._event.set()
        current = asyncio.current_task()
        for task in self._racing - {current}:  # a racer firing its own signal finds out after its wait
            self._cancelled.add(task)
            task.cancel()

    def check(self) -> None:
        if self._event.is_set():
            raise Aborted(self.reason)

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the signal fires first (then cancel it and raise Aborted)."""
        if self._event.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: close it rather than leave it un-awaited
            raise Aborted(self.reason)
        task = asyncio.current_task()
        assert task is not None, "race() runs in a task"
        self._racing.add(task)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if task in self._cancelled:
                self._cancelled.discard(task)
                if task.uncancel() == 0:  # nobody else cancelled it: the signal's cancellation
                    raise Aborted(self.reason) from None
            raise
        finally:
            self._racing.discard(task)
            if task in self._cancelled:  # the awaitable swallowed the cancellation: take it back
                self._cancelled.discard(task)
                task.uncancel()

    async def sleep(self, seconds: float) -> None:
        await self.race(asyncio.sleep(seconds))
