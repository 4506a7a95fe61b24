"""A terminal outlives its server: after a restart (SIGTERM) or a crash (``kill -9``), the next
server of the same database on the machine takes it up from its keeper, with the same program,
what it wrote while no server ran, and its input and output from then on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import websockets

from tests.helpers import running
from tests.servers import process_server
from tests.tools.test_pty import BASH, Reader

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stop", ["restart", "crash"])
async def test_a_terminal_outlives_a_restart_or_a_crash_of_its_server(
    stop: str, tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    server = process_server(str(tmp_path / "opensession.db"), project_dir, config_dir)
    socket_url = server.url.replace("http://", "ws://")
    server.start()
    try:
        info = httpx.post(f"{server.url}/pty", json=BASH).json()
        pty_id = info["id"]
        async with websockets.connect(f"{socket_url}/pty/{pty_id}/connect") as socket:
            reader = Reader(socket)
            await socket.send("echo before-$((1+1)); (sleep 1; echo gap-$((2+2))) &\n")
            await reader.contains("before-2")
            cursor = reader.position
            server.stop() if stop == "restart" else server.kill9()
            # Not closed with 1000, on which OpenCode's app takes the terminal for ended and
            # stops reconnecting: a server that stops says 1012 (service restart), one that died
            # just drops the connection.
            with pytest.raises(websockets.ConnectionClosed) as closed:
                async with asyncio.timeout(5):
                    while True:
                        await socket.recv()
            said = closed.value.rcvd
            assert (said.code if said else None) == (1012 if stop == "restart" else None)
        assert running(info["pid"])
        time.sleep(1.5)  # the program writes while no server runs
        server.start()

        listed = httpx.get(f"{server.url}/pty").json()
        assert [(p["id"], p["pid"], p["status"]) for p in listed] == [(pty_id, info["pid"], "running")]
        # After a restart the client's cursor goes on where it was; after a crash the new server
        # cannot know where the old one's output had reached, and replays all it holds.
        async with websockets.connect(f"{socket_url}/pty/{pty_id}/connect?cursor={cursor}") as socket:
            reader = Reader(socket)
            await reader.contains("gap-4")
            await socket.send("echo after-$((3+3))\n")
            await reader.contains("after-6")
        if stop == "restart":
            assert "before-2" not in reader.text
        assert httpx.put(f"{server.url}/pty/{pty_id}", json={"title": "renamed"}).json()["title"] == "renamed"
        assert httpx.delete(f"{server.url}/pty/{pty_id}").json() is True
        assert not running(info["pid"])
        assert httpx.get(f"{server.url}/pty").json() == []
    finally:
        server.stop()
