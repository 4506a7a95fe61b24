"""MCP benchmark: what a tool call to an MCP server costs through opensession, over the server's
own time.

The MCP server is tests/mcp_server.py over stdio (its ``add`` tool answers at once). First an SDK
client of our own calls it directly (the floor: the server plus the stdio round trip); then
``opensession serve`` (as in ``bench/bench.py``: subprocess, 127.0.0.1, throw-away database and
config) has it configured in opencode.json, and synchronous prompts make the echo model call it.
Figures: the direct call, the tool part's own duration (``state.time``, millisecond resolution),
and whole turns calling the MCP tool against turns calling the built-in ``todoread``; the notes give
the differences, i.e. the per-call overhead. Last, the first prompt in a new project directory
that configures three MCP servers (they start connecting then) against one that configures none:
its ``prompt_async`` -> 204. Everything is deleted on exit.

Run from the repository root::

    python bench/mcp_calls.py [--quick] [--json results.json]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench import ROOT, Metric, Server, cli, mcp_call_times, progress, running, workspace

SCRIPT = ROOT / "tests" / "mcp_server.py"
ADD = 'TOOL:local_add {"a": 1, "b": 2}'
BUILTIN = "TOOL:todoread {}"
SETTLED = ("connected", "failed", "needs_auth")


def _answered(result: Any) -> None:
    assert not result.is_error, result.content


def turn(client: httpx.Client, text: str) -> tuple[float, dict]:
    """One synchronous prompt on a new session: its wall time (ms) and its tool part."""
    sid = client.post("/session", json={}).json()["id"]
    started = time.perf_counter()
    response = client.post(f"/session/{sid}/message", json={"parts": [{"type": "text", "text": text}]})
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    parts = [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]
    assert parts and parts[0]["state"]["status"] == "completed", parts
    return elapsed, parts[0]


def first_accepts(client: httpx.Client, base: Path, rounds: int, servers: int) -> list[float]:
    """``prompt_async`` -> 204 of the first prompt in a new project directory that configures
    ``servers`` MCP servers: the prompt that makes them connect (in the background)."""
    samples = []
    for index in range(rounds):
        project = base / f"first-{servers}-{index}"
        project.mkdir()
        config = {"type": "local", "command": [sys.executable, str(SCRIPT), "stdio"]}
        (project / "opencode.json").write_text(json.dumps({"mcp": {f"s{n}": config for n in range(servers)}}))
        params = {"directory": str(project)}
        sid = client.post("/session", json={}, params=params).json()["id"]
        body = {"parts": [{"type": "text", "text": "hello"}]}
        started = time.perf_counter()
        client.post(f"/session/{sid}/prompt_async", json=body, params=params).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # let the servers finish connecting before the next round
            statuses = client.get("/mcp", params=params).json()
            if all(s.get("status") in SETTLED for s in statuses.values()) and len(statuses) == servers:
                break
            time.sleep(0.05)
    return samples


def run(quick: bool, notes: list[str]) -> list[Metric]:
    count, warmup = (20, 3) if quick else (100, 10)
    direct = Metric("MCP add, direct SDK call (stdio)", "ms", 2.0)
    part = Metric("MCP add, tool part start -> end", "ms", 3.0)
    mcp_turn = Metric("turn calling the MCP tool", "ms", 40.0)
    builtin_turn = Metric("turn calling todoread (built-in)", "ms", 40.0)
    progress(f"direct calls x {count}")
    add = {"a": 1, "b": 2}
    direct.samples = asyncio.run(mcp_call_times([str(SCRIPT), "stdio"], "add", add, count, warmup, _answered))
    with workspace("opensession-bench-mcp-") as (base, project, config):
        server_config = {"type": "local", "command": [sys.executable, str(SCRIPT), "stdio"]}
        (project / "opencode.json").write_text(json.dumps({"mcp": {"local": server_config}}))
        server = Server(base / "db.sqlite", project, config, base / "server.log")
        with running(server), httpx.Client(base_url=server.url, timeout=60.0, trust_env=False) as client:
            assert client.get("/mcp").json() == {"local": {"status": "connected"}}
            for _ in range(warmup):
                turn(client, ADD)
                turn(client, BUILTIN)
            progress(f"turns x {count} (MCP and built-in, alternating)")
            for _ in range(count):
                elapsed, tool = turn(client, ADD)
                mcp_turn.samples.append(elapsed)
                part.samples.append(float(tool["state"]["time"]["end"] - tool["state"]["time"]["start"]))
                builtin_turn.samples.append(turn(client, BUILTIN)[0])
            progress("first prompts in new projects, with 3 MCP servers and with none")
            rounds = 5 if quick else 15
            with_mcp = Metric("first prompt_async, 3 MCP servers", "ms", 5.0)
            without = Metric("first prompt_async, no MCP server", "ms", 5.0)
            (base / "warm").mkdir()
            first_accepts(client, base / "warm", 2, 0)  # warm-up: the code paths of a first directory
            with_mcp.samples = first_accepts(client, base, rounds, 3)
            without.samples = first_accepts(client, base, rounds, 0)
    overhead = statistics.median(part.samples) - statistics.median(direct.samples)
    extra = statistics.median(mcp_turn.samples) - statistics.median(builtin_turn.samples)
    notes.append(f"tool part over the direct call (median): {overhead:+.2f} ms (part times are whole ms)")
    notes.append(
        f"a turn with the MCP tool over one with a built-in tool (median): {extra:+.2f} ms "
        "(includes listing the server's tools again for each of the turn's two steps, as OpenCode does)"
    )
    first = statistics.median(with_mcp.samples) - statistics.median(without.samples)
    notes.append(f"first prompt's accept with 3 MCP servers over none (median): {first:+.2f} ms (they connect after)")
    return [direct, part, mcp_turn, builtin_turn, with_mcp, without]


if __name__ == "__main__":
    raise SystemExit(cli(run, __doc__ or ""))
