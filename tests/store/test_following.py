"""Keeping a copy of a shared table current (``app.store.following``): a read on a notification,
and a stop that ends the loop even when a read it interrupts swallows the cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from typing import Any, cast

from app.store.database import Database
from app.store.following import Following


class _Notifications:
    """Just what ``Following`` asks of the database: listening on a channel."""

    heard: Callable[[str], None]

    async def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        self.heard = callback

    async def notify(self, channel: str, *payloads: str) -> None:
        for payload in payloads:
            self.heard(payload)


async def test_a_notification_reads_again_and_stop_ends_a_read_that_swallows_its_cancellation() -> None:
    reads: list[str] = []
    reading = asyncio.Event()

    async def read() -> None:
        reads.append("read")
        if len(reads) == 1:
            return  # the first read, at start
        reading.set()
        with suppress(asyncio.CancelledError):  # as a callee that takes the cancellation for its own may
            await asyncio.sleep(30)

    database = _Notifications()
    following = Following(cast(Database, database), "channel", read)
    await following.start()
    assert reads == ["read"]
    await cast(Any, database).notify("channel", "")
    async with asyncio.timeout(5):
        await reading.wait()
    async with asyncio.timeout(5):  # it ends, the read it cut short notwithstanding
        await following.stop()
    assert reads == ["read", "read"]
