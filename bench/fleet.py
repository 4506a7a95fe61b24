"""Fleet benchmark: what a turn costs through ``opensession mcp`` over the same turn asked of the
server directly.

One ``opensession serve`` (as in ``bench/bench.py``: subprocess, 127.0.0.1, throw-away database
and config) on the echo model. First the floor: synchronous prompts (``POST /session/:id/message``)
on one session, each a whole turn. Then ``opensession mcp --node a=URL`` as a stdio subprocess,
driven by the MCP SDK's client: ``send_message`` on the node's session, which opens the event
stream, sends ``prompt_async``, waits for ``session.idle`` and answers the reply. The note gives
the difference of the medians: the fleet's overhead per turn (stdio, the event stream, the status
check). Everything is deleted on exit.

Run from the repository root::

    python bench/fleet.py [--quick] [--json results.json]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx

from bench import Metric, Server, cli, mcp_call_times, progress, running, workspace

PROMPT = {"parts": [{"type": "text", "text": "hello"}]}


def direct_turns(client: httpx.Client, count: int, warmup: int) -> list[float]:
    sid = client.post("/session", json={}).json()["id"]
    samples = []
    for index in range(warmup + count):
        started = time.perf_counter()
        client.post(f"/session/{sid}/message", json=PROMPT).raise_for_status()
        if index >= warmup:
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def _echoed(result: Any) -> None:
    assert not result.is_error and result.structured_content, result.content
    assert result.structured_content["text"] == "Echo: hello", result.structured_content


def run(quick: bool, notes: list[str]) -> list[Metric]:
    count, warmup = (20, 3) if quick else (100, 10)
    direct = Metric("turn, POST /session/:id/message", "ms", 40.0)
    fleet = Metric("turn, send_message through opensession mcp", "ms", 60.0)
    with workspace("opensession-bench-fleet-") as (base, project, config):
        server = Server(base / "db.sqlite", project, config, base / "server.log")
        with running(server), httpx.Client(base_url=server.url, timeout=60.0, trust_env=False) as client:
            progress(f"direct turns x {count}")
            direct.samples = direct_turns(client, count, warmup)
            progress(f"fleet turns x {count}")
            args = ["-m", "app.cli", "mcp", "--node", f"a={server.url}"]
            fleet.samples = asyncio.run(mcp_call_times(args, "send_message", {"text": "hello"}, count, warmup, _echoed))
    overhead = statistics.median(fleet.samples) - statistics.median(direct.samples)
    notes.append(f"send_message over a direct synchronous turn (median): {overhead:+.2f} ms")
    return [direct, fleet]


if __name__ == "__main__":
    raise SystemExit(cli(run, __doc__ or ""))
