"""Terminal benchmark of ``opensession serve``: creating ptys (each one a keeper process and the
program), a keystroke's echo over the WebSocket, and how soon a restarted server serves the
terminals of the one before (taken up from their keepers).

One server (subprocess, 127.0.0.1, free port, throw-away SQLite database, config and data
directory, as in ``bench/bench.py``). It creates ``cat`` terminals 200 ms apart (as a user opens
them: the server has a keeper started ahead of need by then) and then back to back (each waits
for a keeper of its own), types lines into one and times each echo, then restarts the server
(SIGTERM, start again) and times from the new process's spawn to the first answer listing every
terminal as running, and the first echo after that. Everything is deleted on exit.

Run from the repository root::

    python bench/terminals.py [--quick] [--json results.json]
"""

from __future__ import annotations

import asyncio
import time

import httpx
import websockets

from bench import Metric, Server, cli, progress, running, timed, workspace

TERMINALS = 20
ECHOES = 200
APART_S = 0.2
CREATE_TARGET_MS = 100.0
ECHO_TARGET_MS = 5.0
TAKE_UP_TARGET_S = 3.0  # a server's start-up, then the terminals taken up


async def _echoes(url: str, pty_id: str, count: int) -> list[float]:
    """Each line's round trip: sent, then read back as ``cat`` (and the pty's echo) return it."""
    found = []
    async with websockets.connect(url.replace("http://", "ws://") + f"/pty/{pty_id}/connect?cursor=-1") as socket:
        for index in range(count):
            line, seen = f"line-{index}-end", ""
            started = time.perf_counter()
            await socket.send(line + "\n")
            while line not in seen:
                frame = await asyncio.wait_for(socket.recv(), 10)
                seen += frame if isinstance(frame, str) else ""
            found.append((time.perf_counter() - started) * 1000)
    return found


def _all_running(client: httpx.Client, ids: set[str]) -> bool:
    try:
        listed = client.get("/pty").json()
    except httpx.TransportError:
        return False
    return {p["id"] for p in listed if p["status"] == "running"} >= ids


def run(quick: bool, notes: list[str]) -> list[Metric]:
    terminals = 5 if quick else TERMINALS
    echoes = 50 if quick else ECHOES
    spaced = Metric("POST /pty, 200 ms apart", "ms", CREATE_TARGET_MS)
    create = Metric("POST /pty, back to back", "ms", CREATE_TARGET_MS)
    echo = Metric("keystroke echo over the WebSocket", "ms", ECHO_TARGET_MS)
    taken = Metric("restart: spawn -> every terminal served again", "s", TAKE_UP_TARGET_S)
    echo_after = Metric("restart: first echo once served again", "ms", ECHO_TARGET_MS * 10)
    with workspace("opensession-bench-terminals-") as (base, project, config):
        server = Server(base / "db.sqlite", project, config, base / "server.log")
        server.env["OPENSESSION_DATA_DIR"] = str(base / "data")
        with running(server), httpx.Client(base_url=server.url, timeout=30.0, trust_env=False) as client:
            progress(f"creating {terminals} terminals")
            client.post("/pty", json={"command": "cat"}).raise_for_status()  # warm-up
            for _ in range(terminals // 2):
                time.sleep(APART_S)
                spaced.samples.append(timed(lambda: client.post("/pty", json={"command": "cat"}), 200))
            for _ in range(terminals // 2):
                create.samples.append(timed(lambda: client.post("/pty", json={"command": "cat"}), 200))
            ids = {p["id"] for p in client.get("/pty").json()}
            first = sorted(ids)[0]
            progress(f"{echoes} echoes")
            echo.samples = asyncio.run(_echoes(server.url, first, echoes))
            progress("restarting the server")
            server.stop()
            started = time.perf_counter()
            server.start()
            while not _all_running(client, ids):
                if time.perf_counter() - started > 60:
                    raise TimeoutError("the terminals were not served again within 60 s")
                time.sleep(0.005)
            taken.samples = [time.perf_counter() - started]
            echo_after.samples = asyncio.run(_echoes(server.url, first, 1))
            for pty_id in ids:
                client.delete(f"/pty/{pty_id}")
    notes.append(f"{len(ids)} terminals running cat; restart = SIGTERM, then a new process on the same database")
    return [spaced, create, echo, taken, echo_after]


if __name__ == "__main__":
    raise SystemExit(cli(run, __doc__ or ""))
