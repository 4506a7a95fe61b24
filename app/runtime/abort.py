"""Cooperative interruption for a drain.

Interrupting never cancels a task in the middle of a database write: the drain races only its
waits (the provider stream, retry back-off) against the signal, and checks it between writes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Literal, TypeVar

T = TypeVar("T")


class Aborted(Exception):
    """Raised inside a drain once its signal fired; ``reason`` is ``abort`` or ``shutdown``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AbortSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiter: asyncio.Future[Literal[True]] | None = None
        self.reason = "abort"
        # Inputs admitted up to this session seq and still waiting behind the interrupted step
        # are settled unanswered (legacy abort); None leaves them for the next wake (V2 interrupt).
        self.settle_through: int | None = None

    @property
    def fired(self) -> bool:
        return self._event.is_set()

    def fire(self, reason: str = "abort", *, settle_through: int | None = None) -> None:
        if not self._event.is_set():
            self.reason = reason
            self.settle_through = settle_through
            self._event.set()

    def check(self) -> None:
        if self._event.is_set():
            raise Aborted(self.reason)

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the signal fires first (then cancel it and raise Aborted)."""
        if self._event.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: close it rather than leave it un-awaited
            raise Aborted(self.reason)
        task = asyncio.ensure_future(awaitable)
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = asyncio.ensure_future(self._event.wait())
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise Aborted(self.reason)

    async def sleep(self, seconds: float) -> None:
        await self.race(asyncio.sleep(seconds))

    def close(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
