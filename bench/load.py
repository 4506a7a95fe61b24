"""The server under load: many sessions prompted at once, with and without many subscribers.

Each scenario starts a fresh ``opensession serve`` (as ``bench/bench.py`` does) whose model is an
instant OpenAI-compatible stub in a process of its own (``bench/stub.py``), declared in the
project's opencode.json. The client runs in a third process (uvloop): it opens the scenario's
``GET /event`` subscribers and one keep-alive connection per session, then drives S sessions x P
prompts concurrently through ``prompt_async`` (each session posts its prompts back to back on its
connection, the sessions in parallel) and waits until every session is idle. Subscribers and
posters are raw HTTP/1.1 on asyncio (``Subscriber``, ``Poster``): the client shares the machine's
CPUs with the server, and httpx would have cost it most of one. Then it checks every reply and every stream:

- each session holds its P prompts in the order sent, and its last reply answers the last prompt;
- each subscriber that kept up received every durable event (compared with a replay of the log
  from where it started) in increasing id order, and none of those reading was cut off;
- a subscriber that never reads is told (its stream's last frame is ``server.overflow``) and its
  stream ends; the server's resident memory is compared with a run of the same padded replies
  without it (the growth of both is the replies' text and caches; the subscriber's queue is held
  to its configured limit).

Figures: accept latency (the ``prompt_async`` round trip), prompts answered per second end to
end, server CPU per prompt, delta fan-out (a delta's arrival at a subscriber minus the moment
the stub wrote it), missed events. The stub answers each prompt by name and stamps each delta
with its send time; both processes share this machine's clock. The notes add the frames each
subscriber's socket read carried on average: how well the server batches its writes to a stream
(TCP may still split or join writes, so it is an indication, not a count of writes).

Run from the repository root::

    python bench/load.py [--quick] [--json results.json] [--only NAME]
    python bench/load.py --against ../other-checkout [--rounds 4] [--only NAME]

``--only`` keeps the scenarios whose name contains NAME (``"no subscribers"``, ``"100
subscribers"``). ``--against`` compares two checkouts side by side instead of printing the table:
each scenario runs on this checkout's server and on the other's in turn, ``--rounds`` times, one
line per run with the speed probe taken before it (``bench.speed_probe_ms``). The machine's speed
drifts from minute to minute; only runs next to each other, with close probes, compare.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import socket
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from stub import InstantStub

from bench import (
    HOST,
    Metric,
    Poster,
    Server,
    Subscriber,
    cli,
    progress,
    running,
    speed_probe_ms,
    uvloop,
    workspace,
)

MODEL = "stub/stub-model"
STAMP = "@t="  # a delta's text carries the time the stub wrote it: "...@t=<unix seconds>"
EVENT_TIMEOUT_S = 120.0
STALLED_RCVBUF = 4096
STALLED_DRAIN_S = 5.0
STALLED_PAD = 20_000
STALLED_QUEUE_BYTES = 1024 * 1024  # small enough for the quick run's stalled subscriber to reach


def answer(body: dict[str, Any], pad: int = 0) -> list[str]:
    """The stub's reply: the last prompt's text echoed (and ``pad`` bytes of filler), then a
    stamped delta (titles: a title)."""
    messages = body.get("messages") or []
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    content = last.get("content")
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
    if "title" in json.dumps(messages[:1]).lower() and "generator" in json.dumps(messages[:1]).lower():
        return ["Load test"]
    return [f"Reply to {text.strip()}" + (" " + "x" * pad if pad else ""), f" {STAMP}{time.time():.6f}"]


@dataclass
class Scenario:
    name: str
    subscribers: int
    stalled: bool = False
    # Filler bytes per reply: a stalled subscriber must be sent more than the kernel's socket
    # buffers hold (a few MB on loopback) before anything queues up for it in the server.
    pad: int = 0


@dataclass
class Outcome:
    accept_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    prompts: int = 0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    fanout_ms: list[float] = field(default_factory=list)
    missed: int = 0
    cut_off: int = 0  # subscribers that kept reading yet were cut off (their missed events do not show)
    reordered: int = 0
    bad_replies: list[str] = field(default_factory=list)
    stalled_told: bool | None = None
    stalled_ended: bool | None = None
    rss_growth_mb: float = 0.0
    stub_requests: int = 0
    stub_connections: int = 0
    reads: int = 0  # socket reads that carried frames, summed over the reading subscribers
    frames: int = 0  # frames those reads carried


# -- the client (its own process) ------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(port: int, last_event_id: int | None = None) -> bytes:
    resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
    return f"GET /event HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n{resume}\r\n".encode()


async def _subscribe(port: int, count: int) -> list[Subscriber]:
    loop = asyncio.get_running_loop()
    subs = []
    for _ in range(count):
        sub = Subscriber(_request(port))
        connected = sub.watch(b'"server.connected"')
        await loop.create_connection(lambda sub=sub: sub, HOST, port)
        await asyncio.wait_for(connected, EVENT_TIMEOUT_S)
        subs.append(sub)
    return subs


def _stalled(port: int) -> socket.socket:
    """A subscriber that never reads: a small receive buffer, the request sent, nothing read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLED_RCVBUF)
    sock.connect((HOST, port))
    sock.sendall(_request(port))
    return sock


def _drain_stalled(sock: socket.socket) -> tuple[bool, bool]:
    """Read what the stalled subscriber was sent, for a few seconds at most (a stream the server
    did not end keeps sending heartbeats): (its last frame was the overflow notice, the response
    ended with its terminating chunk)."""
    deadline = time.monotonic() + STALLED_DRAIN_S
    sock.settimeout(1)
    data = bytearray()
    with suppress(TimeoutError, OSError):
        while time.monotonic() < deadline and (chunk := sock.recv(1 << 20)):
            data += chunk
    sock.close()
    frames = [line for line in bytes(data).split(b"\n") if line.startswith(b"data:")]
    told = bool(frames) and b'"server.overflow"' in frames[-1]
    return told, bytes(data).endswith(b"0\r\n\r\n")


def _stream_ids(sub: Subscriber) -> tuple[list[int], list[tuple[float, str]]]:
    """The durable event ids a subscriber got in order (an ``id:`` higher than the one before it:
    ephemeral frames repeat the last durable id) and the stamped delta texts with arrival times."""
    ids: list[int] = []
    deltas: list[tuple[float, str]] = []
    last = -1
    for arrived, blob in sub.reads:
        frame_id: int | None = None
        for line in blob.split(b"\n"):
            if line.startswith(b"id:"):
                frame_id = int(line[3:])
            elif line.startswith(b"data:"):
                if frame_id is not None and frame_id > last:
                    ids.append(frame_id)
                    last = frame_id
                if b"message.part.delta" in line and STAMP.encode() in line:
                    deltas.append((arrived, json.loads(line[5:])["properties"].get("delta", "")))
                frame_id = None
    return ids, deltas


async def _replayed_ids(client: httpx.AsyncClient, start: int, last: int) -> list[int]:
    """Durable event ids of the log after ``start`` up to ``last``, read back through ``/event``."""
    ids: list[int] = []
    async with client.stream("GET", "/event", headers={"Last-Event-ID": str(start)}) as response:
        frame_id = None
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                frame_id = int(line[3:])
            elif line.startswith("data:") and frame_id is not None:
                if not ids or frame_id > ids[-1]:
                    ids.append(frame_id)
                if frame_id >= last:
                    break
    return [i for i in ids if start < i <= last]


async def _check_replies(client: httpx.AsyncClient, sessions: list[str], prompts: int) -> list[str]:
    problems = []
    for sid in sessions:
        messages = (await client.get(f"/session/{sid}/message")).json()
        users = [p["text"] for m in messages if m["info"]["role"] == "user" for p in m["parts"] if p["type"] == "text"]
        wanted = [f"{sid} #{i}" for i in range(prompts)]
        if users != wanted:
            problems.append(f"{sid}: prompts {users[:3]}... != sent order")
        replies = [m for m in messages if m["info"]["role"] == "assistant"]
        broken = [m["info"]["id"] for m in replies if m["info"].get("error") or not m["info"]["time"].get("completed")]
        if broken:
            problems.append(f"{sid}: unfinished or failed replies {broken[:3]}")
        last = "".join(p.get("text", "") for p in replies[-1]["parts"] if p["type"] == "text") if replies else ""
        if not last.startswith(f"Reply to {wanted[-1]}"):
            problems.append(f"{sid}: last reply {last[:60]!r} does not answer {wanted[-1]!r}")
    return problems


async def _wait_idle(client: httpx.AsyncClient, sessions: set[str]) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while time.monotonic() < deadline:
        busy = (await client.get("/session/status")).json()
        if not sessions & set(busy):
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("sessions still busy")


async def _drive(port: int, pid: int, scenario: Scenario, sessions: int, prompts: int) -> Outcome:
    outcome = Outcome()
    # Idle connections are dropped before the server's 5 s keep-alive timeout would close them
    # under a request (a ReadError on a loaded machine, where the prompts take longer than that).
    limits = httpx.Limits(max_connections=sessions + 10, max_keepalive_connections=sessions + 10, keepalive_expiry=4.0)
    async with httpx.AsyncClient(
        base_url=f"http://{HOST}:{port}", limits=limits, timeout=EVENT_TIMEOUT_S, trust_env=False
    ) as client:
        ids = [(await client.post("/session", json={})).json()["id"] for _ in range(sessions)]
        subs = await _subscribe(port, scenario.subscribers)
        stalled = _stalled(port) if scenario.stalled else None
        posters = dict(zip(ids, await asyncio.gather(*(Poster(port).connect() for _ in ids)), strict=True))
        await asyncio.sleep(0.2)
        rss_before = _rss_mb(pid)
        cpu_before, client_before, started = _cpu_s(pid), time.process_time(), time.perf_counter()

        async def run(sid: str) -> None:
            for i in range(prompts):
                sent = time.perf_counter()
                status, body = await posters[sid].post(
                    f"/session/{sid}/prompt_async", {"parts": [{"type": "text", "text": f"{sid} #{i}"}]}
                )
                outcome.accept_ms.append((time.perf_counter() - sent) * 1000)
                if status != 204:
                    raise RuntimeError(f"prompt_async -> {status}: {body[:200]!r}")

        await asyncio.gather(*(run(sid) for sid in ids))
        for poster in posters.values():
            poster.close()
        await _wait_idle(client, set(ids))
        outcome.wall_s = time.perf_counter() - started
        outcome.server_cpu_s = _cpu_s(pid) - cpu_before
        outcome.client_cpu_s = time.process_time() - client_before
        outcome.rss_growth_mb = _rss_mb(pid) - rss_before
        outcome.prompts = sessions * prompts
        await asyncio.sleep(0.3)  # the last frames reach the subscribers
        outcome.bad_replies = await _check_replies(client, ids, prompts)
        if stalled is not None:
            outcome.stalled_told, outcome.stalled_ended = await asyncio.to_thread(_drain_stalled, stalled)
        streams = [_stream_ids(sub) for sub in subs]
        outcome.reads = sum(len(sub.reads) for sub in subs)
        outcome.frames = sum(blob.count(b"\n\n") for sub in subs for _, blob in sub.reads)
        outcome.cut_off = sum(1 for sub in subs if any(b'"server.overflow"' in blob for _, blob in sub.reads))
        for sub in subs:
            if sub.transport is not None:
                sub.transport.close()
        if streams:
            first = [i for i, _ in streams if i]
            start = min((ids_[0] for ids_ in first), default=0) - 1
            last = max((ids_[-1] for ids_ in first), default=0)
            expected = set(await _replayed_ids(client, start, last)) if last > start else set()
            for got, deltas in streams:
                outcome.missed += len(expected - set(got))
                outcome.reordered += sum(1 for a, b in itertools.pairwise(got) if b <= a)
                for arrived, text in deltas:
                    stamp = float(text.rsplit(STAMP, 1)[1])
                    outcome.fanout_ms.append((arrived - stamp) * 1000)
    return outcome


def _client(port: int, pid: int, scenario: Scenario, sessions: int, prompts: int, results: Any) -> None:
    factory = uvloop.new_event_loop if uvloop else None
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            results.put(runner.run(_drive(port, pid, scenario, sessions, prompts)))
        except BaseException as exc:  # the parent reports it (a child's traceback is easy to miss)
            results.put(RuntimeError(f"load client failed: {exc!r}"))
            raise


# -- scenarios ------------------------------------------------------------------------------------


def _scenario(
    scenario: Scenario, sessions: int, prompts: int, queue_bytes: int, root: Path | None = None
) -> tuple[Outcome, InstantStub]:
    stub_answer = partial(answer, pad=scenario.pad)
    with workspace("opensession-load-bench-") as (base, project, config), InstantStub(stub_answer) as stub:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": f"http://127.0.0.1:{stub.port}/v1", "apiKey": "bench-key"},
            "models": {"stub-model": {}},
        }
        (project / "opencode.json").write_text(json.dumps({"model": MODEL, "provider": {"stub": provider}}))
        server = Server(base / "load.db", project, config, base / "server.log")
        server.env["OPENSESSION_SUBSCRIBER_QUEUE_BYTES"] = str(queue_bytes)
        if root is not None:
            server.run_from(root)
        with running(server) as srv:
            assert srv.proc is not None
            results: multiprocessing.Queue[Outcome | BaseException] = multiprocessing.Queue()
            client = multiprocessing.Process(
                target=_client, args=(srv.port, srv.proc.pid, scenario, sessions, prompts, results)
            )
            client.start()
            try:
                outcome = results.get(timeout=600)
                if isinstance(outcome, BaseException):
                    raise RuntimeError(f"{outcome}\n{srv.log_tail()}")
            finally:
                client.join(timeout=30)
                if client.is_alive():
                    client.kill()
        outcome.stub_requests, outcome.stub_connections = stub.requests, stub.connections
        return outcome, stub


def _scenarios(quick: bool, only: list[str]) -> list[tuple[Scenario, float, float, float | None]]:
    """The scenarios with their targets: accept p99 (ms), prompts/s, server CPU per prompt (ms)."""
    crowd = 30 if quick else 100
    scenarios = [
        (Scenario("no subscribers", 0), 50.0, 150.0, 3.0),
        (Scenario(f"{crowd} subscribers", crowd), 100.0, 100.0, None),
        # The same padded replies without the stalled subscriber: the server's memory grows with
        # them (stored text, caches), so this is what the stalled run's growth is compared with.
        (Scenario("10 subscribers, padded replies", 10, pad=STALLED_PAD), 100.0, 100.0, None),
        (Scenario("10 subscribers + 1 that never reads", 10, stalled=True, pad=STALLED_PAD), 100.0, 100.0, None),
    ]
    return [entry for entry in scenarios if not only or any(name in entry[0].name for name in only)]


def _queue_bytes(scenario: Scenario) -> int:
    return STALLED_QUEUE_BYTES if scenario.pad else 8 * 1024 * 1024


def _sizes(quick: bool) -> tuple[int, int]:
    return (20, 5) if quick else (50, 10)


def run(quick: bool, notes: list[str], only: list[str]) -> list[Metric]:
    sessions, prompts = _sizes(quick)
    metrics: list[Metric] = []
    control_rss_mb = 0.0
    for scenario, accept_target, rate_target, cpu_target in _scenarios(quick, only):
        progress(f"{scenario.name}: {sessions} sessions x {prompts} prompts")
        queue_bytes = _queue_bytes(scenario)
        outcome, _stub = _scenario(scenario, sessions, prompts, queue_bytes)
        accept = Metric(f"{scenario.name}: accept", "ms", accept_target, samples=outcome.accept_ms, judged_on="p99")
        rate = Metric(
            f"{scenario.name}: prompts/s",
            "ev/s",
            rate_target,
            value=outcome.prompts / outcome.wall_s,
            higher_is_better=True,
        )
        metrics += [accept, rate]
        per_prompt = outcome.server_cpu_s / outcome.prompts * 1000
        if cpu_target is not None:
            metrics.append(Metric(f"{scenario.name}: server CPU per prompt", "ms", cpu_target, value=per_prompt))
        if outcome.fanout_ms:
            metrics.append(
                Metric(f"{scenario.name}: delta fan-out", "ms", 50, samples=outcome.fanout_ms, judged_on="p99")
            )
        notes.append(
            f"{scenario.name}: {outcome.prompts} prompts in {outcome.wall_s:.2f} s; server CPU "
            f"{per_prompt:.2f} ms/prompt; client CPU {outcome.client_cpu_s / outcome.wall_s:.0%} of wall; "
            f"stub {outcome.stub_requests} requests on {outcome.stub_connections} connections; "
            + (f"{outcome.frames / outcome.reads:.1f} frames per subscriber read; " if outcome.reads else "")
            + f"missed events {outcome.missed}, out of order {outcome.reordered}, "
            f"reading subscribers cut off {outcome.cut_off}; "
            f"replies checked: {'all right' if not outcome.bad_replies else '; '.join(outcome.bad_replies[:3])}"
        )
        if scenario.pad and not scenario.stalled:
            control_rss_mb = outcome.rss_growth_mb
        if scenario.stalled:
            notes.append(
                f"{scenario.name}: the stalled subscriber was told {outcome.stalled_told}, its stream ended "
                f"{outcome.stalled_ended}; server RSS grew {outcome.rss_growth_mb:.1f} MB, against "
                f"{control_rss_mb:.1f} MB with the same replies and no stalled subscriber "
                f"(limit {queue_bytes / 1048576:.0f} MB per subscriber)"
            )
    return metrics


def _summary(outcome: Outcome) -> str:
    accept = Metric("accept", "ms", 0, samples=outcome.accept_ms)
    line = (
        f"{outcome.prompts / outcome.wall_s:.0f} prompts/s, "
        f"{outcome.server_cpu_s / outcome.prompts * 1000:.2f} ms server CPU/prompt, "
        f"accept p50 {accept.median:.1f} p99 {accept.p99:.1f} ms"
    )
    if outcome.fanout_ms:
        fanout = Metric("fan-out", "ms", 0, samples=outcome.fanout_ms)
        line += f", fan-out p50 {fanout.median:.1f} p99 {fanout.p99:.1f} ms"
    problems = outcome.missed + outcome.reordered + outcome.cut_off + len(outcome.bad_replies)
    return line + ("" if not problems else f", {problems} PROBLEMS (missed, reordered, cut off, bad replies)")


def compare(against: Path, rounds: int, quick: bool, only: list[str]) -> int:
    """Each scenario on this checkout's server and on ``against``'s in turn, ``rounds`` times."""
    sessions, prompts = _sizes(quick)
    sides = [("this", None), (against.name or str(against), against.resolve())]
    for scenario, *_targets in _scenarios(quick, only):
        for round_no in range(1, rounds + 1):
            for label, root in sides:
                probe = speed_probe_ms()
                outcome, _stub = _scenario(scenario, sessions, prompts, _queue_bytes(scenario), root)
                print(f"{scenario.name} #{round_no} {label}: {_summary(outcome)}; probe {probe:.0f} ms", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="scenarios whose name has NAME")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT", help="compare with another checkout's server")
    parser.add_argument("--rounds", type=int, default=3, help="runs per side and scenario with --against")
    ours, rest = parser.parse_known_args(argv)
    if ours.against is not None and not {"-h", "--help"} & set(rest):
        if not (ours.against / "app" / "cli").is_dir():
            parser.error(f"--against {ours.against}: not an opensession checkout")
        return compare(ours.against, ours.rounds, "--quick" in rest, ours.only)
    return cli(partial(run, only=ours.only), __doc__ or "", argv, parents=[parser])


if __name__ == "__main__":
    sys.exit(main())
