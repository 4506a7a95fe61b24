"""Stopping an MCP connection (``app.runtime.extensions._connection``) from a task that is itself
cancelled, against the real test server over stdio."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.runtime.extensions._connection import Connection
from app.runtime.extensions._spec import parse
from tests.tools.test_mcp import local, processes_of


async def test_a_caller_cancelled_while_it_stops_a_server_is_cancelled_and_the_server_ends(tmp_path: Path) -> None:
    """A stopping server cancels what is stopping a connection (another process's change being
    applied): the connection ends, and the cancellation reaches the caller. Swallowed, the caller
    went on as if never cancelled, and the server's shutdown waited for it for good."""
    connection = Connection(parse("extra", local(tmp_path)), str(tmp_path), 10.0)
    connection.start()
    await connection.ready()
    assert connection.status == {"status": "connected"}
    stopping = asyncio.create_task(connection.stop())
    await asyncio.sleep(0)  # in its wait for the connection to end
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    assert stopping.cancelled()
    assert processes_of(tmp_path) == []
