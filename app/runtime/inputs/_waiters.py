"""Lets a synchronous prompt (``POST /session/:id/message``) wait for its own input to settle
without polling. Waiters of a session are also released when its drain goes idle, so a waiter
never hangs on an input that an abort settled. A waiter hears the id of the reply that answered
its input when the turn committed one (None otherwise: read the input again to know)."""

from __future__ import annotations

import asyncio
from collections import defaultdict


class InputWaiters:
    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[str | None]] = {}
        self._by_session: dict[str, set[str]] = defaultdict(set)

    def register(self, session_id: str, input_id: str) -> asyncio.Future[str | None]:
        future = self._futures.get(input_id)
        if future is None:
            future = self._futures[input_id] = asyncio.get_running_loop().create_future()
            self._by_session[session_id].add(input_id)
        return future

    def settle(self, input_id: str, reply: str | None = None) -> None:
        future = self._futures.pop(input_id, None)
        if future is not None and not future.done():
            future.set_result(reply)

    def forget(self, session_id: str, input_id: str) -> None:
        """Drop the waiter of ``input_id`` once nobody waits on it (its prompt's caller has its
        answer): one whose session is drained by another process is never settled here."""
        self.settle(input_id)
        waiting = self._by_session.get(session_id)
        if waiting is not None:
            waiting.discard(input_id)
            if not waiting:
                del self._by_session[session_id]

    def settle_session(self, session_id: str) -> None:
        for input_id in self._by_session.pop(session_id, set()):
            self.settle(input_id)
