"""An event stream's body writes: written at once in a feed's call when the send does not wait,
otherwise finished in the stream's own task, in order, with failures and cancellation reaching
the right place."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message

from app.api.sse import Body


async def _record(sent: list[bytes], message: Message) -> None:
    sent.append(message.get("body", b""))


@pytest.mark.asyncio
async def test_a_body_write_that_has_to_wait_is_finished_by_the_stream_before_the_next() -> None:
    """``write_now`` writes at once when the send does not wait; a send that waits is finished by
    ``settle`` (in the stream's task), and nothing else is written before it."""
    sent: list[bytes] = []
    client_reads = asyncio.get_running_loop().create_future()

    async def send(message: Message) -> None:
        if message.get("body") == b"slow":
            await client_reads  # the client's socket is full until it reads
        await _record(sent, message)

    body = Body()
    body.bind(send)
    assert body.write_now(b"fast") and sent == [b"fast"] and not body.writing
    assert not body.write_now(b"slow")
    assert body.writing  # the send timeout counts from here
    assert not body.write_now(b"next")  # refused while the slow one is pending
    writing = asyncio.ensure_future(body.write(b"after"))
    await asyncio.sleep(0.01)
    assert sent == [b"fast"] and not writing.done()
    client_reads.set_result(None)
    await writing
    assert sent == [b"fast", b"slow", b"after"] and not body.writing


@pytest.mark.asyncio
async def test_a_body_write_that_fails_in_the_feeds_call_raises_in_the_stream() -> None:
    """A send that fails in ``write_now`` (a feed's call, which must go on to other streams)
    raises in the stream's own task, at ``settle``."""

    async def send(message: Message) -> None:
        raise OSError("connection lost")

    body = Body()
    body.bind(send)
    assert not body.write_now(b"x")
    with pytest.raises(OSError, match="connection lost"):
        await body.settle()


@pytest.mark.asyncio
async def test_a_stream_cancelled_while_finishing_a_write_cancels_the_send() -> None:
    """Cancelling the task that finishes a pending write (the client went away) reaches the send
    itself, as if the task had awaited it directly."""
    cancelled = asyncio.Event()

    async def send(message: Message) -> None:
        try:
            await asyncio.get_running_loop().create_future()  # never done
        except asyncio.CancelledError:
            cancelled.set()
            raise

    body = Body()
    body.bind(send)
    assert not body.write_now(b"x")
    settling = asyncio.ensure_future(body.settle())
    await asyncio.sleep(0)
    settling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await settling
    assert cancelled.is_set()
