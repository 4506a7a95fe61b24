"""Latency, throughput, start-up and memory benchmark of ``opensession serve`` against its targets.

The server runs as a real subprocess (``python -m app.cli serve``) bound to 127.0.0.1 on a free
port, with a throw-away database, project directory and config directory, so the figures include
uvicorn, the HTTP stack and SQLite exactly as a client sees them, and nothing on this machine
(an ``opencode.json``, an old database) changes the result. The V2 figures (``/api/...``) come from
a second server on its own database, so they leave the legacy figures (and the existing-database
start-up) exactly as they were. Everything is cleaned up on exit.

Run from the repository root::

    python bench/bench.py [--quick] [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import math
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

try:  # uvicorn[standard] brings uvloop; the fan-out client then costs less per read
    import uvloop
except ImportError:  # pragma: no cover - the stdlib loop works, it only adds client delay
    uvloop = None

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
PROMPT_BODY = {"parts": [{"type": "text", "text": "hi"}]}
V2_PROMPT_BODY = {"prompt": {"text": "hi"}}
HEALTH_TIMEOUT_S = 30.0
EVENT_TIMEOUT_S = 10.0
HISTORY_BUILD_LIMIT_S = 300.0  # building the replay session must not run away on a slow machine
CLIENT_BOUND_CPU = 0.8  # client CPU / wall time above which the client may be what limits a figure


# -- results ------------------------------------------------------------------------------------


def nearest_rank(samples: list[float], fraction: float, *, descending: bool = False) -> float:
    ordered = sorted(samples, reverse=descending)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class Metric:
    """One measured figure with its target and, for the legacy API, the real OpenCode figure."""

    name: str
    unit: str  # "ms", "s", "MB", "ev/s" or "x" (a ratio)
    target: float
    opencode: float | None = None  # no OpenCode reference for the V2 figures
    samples: list[float] = field(default_factory=list)
    value: float | None = None  # for single readings (memory); otherwise derived from samples
    higher_is_better: bool = False  # throughputs
    judged_on: str = "median"  # or "p99": the statistic compared with the target

    @property
    def median(self) -> float:
        return self.value if self.value is not None else statistics.median(self.samples)

    def tail(self, fraction: float) -> float | None:
        """Percentile on the bad side: high latencies, low throughputs (so a throughput's "p90" is
        its 10th percentile)."""
        if self.value is not None or not self.samples:
            return None
        return nearest_rank(self.samples, fraction, descending=self.higher_is_better)

    @property
    def p90(self) -> float | None:
        return self.tail(0.9)

    @property
    def p99(self) -> float | None:
        return self.tail(0.99)

    @property
    def judged(self) -> float:
        tail = self.p99 if self.judged_on == "p99" else None
        return self.median if tail is None else tail

    @property
    def ok(self) -> bool:
        return self.judged >= self.target if self.higher_is_better else self.judged <= self.target

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(median=self.median, p90=self.p90, p99=self.p99, ok=self.ok, n=len(self.samples) or 1)
        return data


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "ev/s":
        return f"{value:,.0f} ev/s"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.2f} ms"


def _target(metric: Metric) -> str:
    relation = ">= " if metric.higher_is_better else "<= "
    statistic = "" if metric.judged_on == "median" else metric.judged_on + " "
    return statistic + relation + _fmt(metric.target, metric.unit)


def print_table(metrics: list[Metric]) -> None:
    headers = ("metric", "n", "median", "p90", "p99", "target", "OpenCode", "")
    rows = [
        (
            m.name,
            str(len(m.samples) or 1),
            _fmt(m.median, m.unit),
            _fmt(m.p90, m.unit),
            _fmt(m.p99, m.unit),
            _target(m),
            _fmt(m.opencode, m.unit),
            "ok" if m.ok else "MISS",
        )
        for m in metrics
    ]
    widths = [max(len(r[i]) for r in (headers, *rows)) for i in range(len(headers))]
    line = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


# -- the server process ---------------------------------------------------------------------------


def die_with_parent() -> None:
    """Linux: the server gets SIGTERM if the benchmark itself is killed, so none is left behind."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_env(config_dir: Path) -> dict[str, str]:
    """Environment of a child that imports ``app``: an empty config dir keeps a user's
    opencode.json from changing the default (echo) model."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENSESSION_CONFIG_DIR": str(config_dir),
        "PYTHONUNBUFFERED": "1",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Server:
    """One ``opensession serve`` subprocess; ``stop`` always reaps it (SIGTERM, then SIGKILL)."""

    def __init__(self, db: Path, directory: Path, config_dir: Path, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.args = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--hostname",
            HOST,
            "--port",
            str(self.port),
            "--db",
            str(db),
            "--directory",
            str(directory),
        ]
        self.env = child_env(config_dir)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.root = ROOT  # the checkout whose code it runs

    def run_from(self, root: Path) -> None:
        """Run another checkout's code (a side-by-side comparison)."""
        self.root = root
        self.env["PYTHONPATH"] = str(root)

    def start(self) -> float:
        """Spawn and poll ``/global/health``; returns seconds from spawn to the first 200."""
        with self.log_path.open("ab") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                self.args, cwd=self.root, env=self.env, stdout=log, stderr=log, preexec_fn=die_with_parent
            )
        with httpx.Client(base_url=self.url, timeout=1.0, trust_env=False) as client:
            while time.perf_counter() - started < HEALTH_TIMEOUT_S:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get("/global/health").status_code == 200:
                        return time.perf_counter() - started
                except httpx.TransportError:
                    pass
                time.sleep(0.002)  # fine-grained: the poll interval bounds the start-up resolution
        raise TimeoutError(f"server did not become healthy:\n{self.log_tail()}")

    def peak_rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("VmHWM not found")

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process (all its threads), to tell who limits a figure."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def switches(self) -> tuple[int, int]:
        """Context switches of the server's threads so far: (voluntary, involuntary). The second
        counts how often a runnable thread lost its core, which a machine with more runnable
        processes than cores makes frequent."""
        assert self.proc is not None
        voluntary = involuntary = 0
        for status in Path(f"/proc/{self.proc.pid}/task").glob("*/status"):
            with suppress(OSError):  # a thread that ended meanwhile
                for line in status.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        involuntary += int(line.split()[1])
        return voluntary, involuntary

    def log_tail(self, lines: int = 30) -> str:
        with suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextmanager
def workspace(prefix: str) -> Iterator[tuple[Path, Path, Path]]:
    """A throw-away directory with an empty project and config directory in it: (base, project,
    config). Deleted on exit, servers' databases and logs included."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        base = Path(tmp)
        project, config = base / "project", base / "config"
        project.mkdir()
        config.mkdir()
        yield base, project, config


# -- a light HTTP client ------------------------------------------------------------------------


class Poster:
    """One session's keep-alive HTTP/1.1 connection for ``prompt_async``, on asyncio streams.

    httpx costs the client process several milliseconds of CPU per request once 50 requests are
    in flight (its pool scans every connection for every request); the client shares this
    machine's two CPUs with the server, so that cost would show up as the server's latency. This
    sends the bytes and reads the status line and headers, which a 204 ends."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def connect(self) -> Poster:
        self._streams = await asyncio.open_connection(HOST, self._port)
        return self

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        assert self._streams is not None, "connect first"
        reader, writer = self._streams
        payload = json.dumps(body).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self._port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await reader.readexactly(length) if length else b""

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()


# -- the event stream ------------------------------------------------------------------------------


class EventStream:
    """``GET /event`` read on its own thread, so each frame is timestamped when it arrives rather
    than when the measuring thread gets round to it (a delta can arrive before the prompt's 204)."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(5.0, read=None), trust_env=False)
        self._frames: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self._connected = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._read, name="bench-sse", daemon=True)

    def __enter__(self) -> EventStream:
        self._thread.start()
        if not self._connected.wait(10):
            raise TimeoutError("no server.connected frame on /event")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._closing = True
        self._client.close()  # unblocks the reader
        self._thread.join(timeout=5)

    def _read(self) -> None:
        try:
            with self._client.stream("GET", "/event", headers={"accept": "text/event-stream"}) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    arrived = time.perf_counter()
                    frame = json.loads(line[5:])
                    if frame.get("type") == "server.connected":
                        self._connected.set()
                    self._frames.put((arrived, frame))
        except (httpx.HTTPError, RuntimeError):
            if not self._closing:
                raise

    def drain(self) -> None:
        """Drop frames of earlier work."""
        with suppress(queue.Empty):
            while True:
                self._frames.get_nowait()

    def wait_for(self, session_id: str, wanted: set[str]) -> dict[str, float]:
        """Arrival time of the first frame of each ``wanted`` type for ``session_id``; the last
        wanted type must be ``session.idle`` (nothing of the session follows it)."""
        seen: dict[str, float] = {}
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while len(seen) < len(wanted):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"missing {sorted(wanted - set(seen))} for {session_id}")
            arrived, frame = self._frames.get(timeout=remaining)
            kind = frame.get("type")
            if kind not in wanted or kind in seen:
                continue
            if frame.get("properties", {}).get("sessionID") == session_id:
                seen[kind] = arrived
        return seen


# -- measurements ----------------------------------------------------------------------------------


def timed(call: Callable[[], httpx.Response], expect: int) -> float:
    started = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - started
    if response.status_code != expect:
        raise RuntimeError(
            f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:300]}"
        )
    return elapsed * 1000


def new_session(client: httpx.Client) -> str:
    response = client.post("/session")
    response.raise_for_status()
    return str(response.json()["id"])


def bench_create(client: httpx.Client, metric: Metric, warmup: int, iterations: int) -> None:
    for _ in range(warmup):
        new_session(client)
    metric.samples = [timed(lambda: client.post("/session"), 200) for _ in range(iterations)]


def bench_prompts(
    client: httpx.Client,
    events: EventStream,
    admit: Metric,
    first_delta: Metric,
    idle: Metric,
    warmup: int,
    iterations: int,
) -> None:
    """Each prompt goes to a fresh, idle session and the turn is awaited to ``session.idle`` before
    the next one, so no background turn overlaps a measurement."""
    for index in range(warmup + iterations):
        session_id = new_session(client)
        events.drain()
        started = time.perf_counter()
        path = f"/session/{session_id}/prompt_async"
        admitted = timed(lambda path=path: client.post(path, json=PROMPT_BODY), 204)
        seen = events.wait_for(session_id, {"message.part.delta", "session.idle"})
        if index < warmup:
            continue
        admit.samples.append(admitted)
        first_delta.samples.append((seen["message.part.delta"] - started) * 1000)
        idle.samples.append((seen["session.idle"] - started) * 1000)


def bench_messages(client: httpx.Client, metric: Metric, prompts: int, warmup: int, iterations: int) -> None:
    session_id = new_session(client)
    for index in range(prompts):
        body = {"parts": [{"type": "text", "text": f"message {index}: hi"}]}
        client.post(f"/session/{session_id}/message", json=body, timeout=30).raise_for_status()
    count = len(client.get(f"/session/{session_id}/message").json())
    if count != 2 * prompts:
        raise RuntimeError(f"expected {2 * prompts} messages, the session holds {count}")
    path = f"/session/{session_id}/message"
    for _ in range(warmup):
        client.get(path)
    metric.samples = [timed(lambda: client.get(path), 200) for _ in range(iterations)]


def bench_startups(make: Callable[[int], Server], runs: int) -> list[float]:
    """Spawn-to-healthy of ``runs`` servers, one at a time; each is stopped before the next."""
    samples = []
    for index in range(runs):
        server = make(index)
        try:
            samples.append(server.start())
        finally:
            server.stop()
    return samples


# -- V2 measurements -------------------------------------------------------------------------------


def new_v2_session(client: httpx.Client) -> str:
    response = client.post("/api/session", json={})
    response.raise_for_status()
    return str(response.json()["data"]["id"])


def wait_idle(client: httpx.Client, session_id: str) -> None:
    response = client.post(f"/api/session/{session_id}/wait", timeout=EVENT_TIMEOUT_S)
    if response.status_code != 204:
        raise RuntimeError(f"wait on {session_id} -> {response.status_code}: {response.text[:300]}")


def bench_v2_prompts(client: httpx.Client, metric: Metric, warmup: int, iterations: int) -> None:
    """Like prompt_async: each prompt goes to a fresh, idle session, and ``/wait`` lets its turn
    finish before the next prompt, so no background turn overlaps a measurement."""
    for index in range(warmup + iterations):
        path = f"/api/session/{new_v2_session(client)}"
        admitted = timed(lambda path=path: client.post(f"{path}/prompt", json=V2_PROMPT_BODY), 200)
        wait_idle(client, path.rsplit("/", 1)[1])
        if index >= warmup:
            metric.samples.append(admitted)


def last_seq(client: httpx.Client, session_id: str, after: int = 0) -> int:
    """The session's last durable ``seq``, paging ``/history`` from ``after`` until ``hasMore`` is false."""
    last = after
    for _ in range(10_000):  # bounded: 1M events, far more than any session built here
        response = client.get(f"/api/session/{session_id}/history", params={"after": last, "limit": 100})
        response.raise_for_status()
        page = response.json()
        if page["data"]:
            last = int(page["data"][-1]["durable"]["seq"])
        if not page["hasMore"]:
            return last
    raise RuntimeError(f"history of {session_id} did not end")


def build_history(client: httpx.Client, events: int) -> tuple[str, int, int, float]:
    """A session holding at least ``events`` durable events, from legacy synchronous prompts (one
    request per whole turn, the cheapest way to fill it). Returns (session, last seq, prompts,
    seconds)."""
    session_id = new_v2_session(client)
    started = time.perf_counter()
    last, prompts = 0, 0
    while last < events:
        if time.perf_counter() - started > HISTORY_BUILD_LIMIT_S:
            raise TimeoutError(f"only {last} events after {HISTORY_BUILD_LIMIT_S:.0f} s")
        # Batches of 50 prompts, then as many as the events per prompt so far say are missing.
        batch = 50 if last == 0 else max(1, min(50, math.ceil((events - last) * prompts / last)))
        for _ in range(batch):
            body = {"parts": [{"type": "text", "text": f"message {prompts}: hi"}]}
            client.post(f"/session/{session_id}/message", json=body, timeout=30).raise_for_status()
            prompts += 1
        last = last_seq(client, session_id, last)
    return session_id, last, prompts, time.perf_counter() - started


def replay_once(client: httpx.Client, session_id: str, last: int) -> tuple[float, float]:
    """One subscriber reads ``/api/session/:id/event?after=0`` up to the frame ``id: last``.
    Returns (seconds from sending the request to that frame, client CPU seconds meanwhile).

    The raw body is split into frames with ``bytes.split`` only (no per-line decoding, no JSON), so
    the client costs little per event; all ``last`` frames must arrive, once each and in order."""
    frames, pending = 0, b""
    cpu_started, started = time.thread_time(), time.perf_counter()
    path = f"/api/session/{session_id}/event"
    with client.stream("GET", path, params={"after": 0}, headers={"accept": "text/event-stream"}) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            *complete, pending = (pending + chunk).split(b"\n\n")
            events = [frame for frame in complete if frame.startswith(b"id:")]  # not heartbeats
            if not events:
                continue
            frames += len(events)
            if int(events[-1].split(b"\n", 1)[0][3:]) >= last:
                elapsed = time.perf_counter() - started
                cpu = time.thread_time() - cpu_started
                break
        else:
            raise RuntimeError(f"replay of {session_id} ended after {frames} of {last} frames")
    if frames != last:
        raise RuntimeError(f"replay of {session_id} delivered {frames} frames for seq 1..{last}")
    return elapsed, cpu


def bench_replay(
    client: httpx.Client, server: Server, metric: Metric, events: int, runs: int, notes: list[str]
) -> None:
    session_id, last, prompts, seconds = build_history(client, events)
    notes.append(
        f"replay session: {last:,} durable events from {prompts} synchronous prompts, built in {seconds:.1f} s"
    )
    client_cpu = server_cpu = wall = 0.0
    for index in range(runs + 1):  # the first run warms the page cache and the server's code paths
        server_before = server.cpu_seconds()
        elapsed, cpu = replay_once(client, session_id, last)
        if index == 0:
            continue
        metric.samples.append(last / elapsed)
        wall += elapsed
        client_cpu += cpu
        server_cpu += server.cpu_seconds() - server_before
    verdict = "the client may be limiting" if client_cpu / wall >= CLIENT_BOUND_CPU else "the client is not the limit"
    notes.append(
        f"replay CPU / wall: client {client_cpu / wall:.0%}, server {server_cpu / wall:.0%} (all threads) -> {verdict}"
    )


class Subscriber(asyncio.Protocol):
    """One ``GET /api/event`` subscriber on a raw HTTP/1.1 connection.

    ``data_received`` only takes the wall-clock time and cuts off the complete frames; they are
    decoded after the measurement. A hundred httpx streams in one client process would spend tens
    of microseconds per frame each, serialised on one event loop, and that would show up as fan-out
    delay; this does next to nothing per read."""

    def __init__(self, request: bytes) -> None:
        self._request = request
        self._pending = b""
        self._watch: tuple[tuple[bytes, ...], asyncio.Future[None]] | None = None
        self.reads: list[tuple[float, bytes]] = []  # (time.time() on arrival, complete frames)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        arrived = time.time()
        pending = self._pending + data
        end = pending.rfind(b"\n\n") + 2
        if end == 1:
            self._pending = pending
            return
        blob, self._pending = pending[:end], pending[end:]
        self.reads.append((arrived, blob))
        watch = self._watch
        if watch is not None and not watch[1].done() and all(marker in blob for marker in watch[0]):
            watch[1].set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None and not self._watch[1].done():
            self._watch[1].set_exception(ConnectionError(f"event stream closed: {exc}"))

    def watch(self, *markers: bytes) -> asyncio.Future[None]:
        """Resolved by the next read whose frames contain every marker (set before the cause)."""
        self._watch = (markers, asyncio.get_running_loop().create_future())
        return self._watch[1]

    def frames(self) -> Iterator[tuple[float, dict[str, Any]]]:
        """Every decoded frame with its arrival time; chunk-size lines are not ``data:`` lines."""
        if not self.reads or not self.reads[0][1].startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"/api/event did not answer 200: {self.reads[:1]!r}")
        for arrived, blob in self.reads:
            for line in blob.split(b"\n"):
                if line.startswith(b"data:"):
                    yield arrived, json.loads(line[5:])


@dataclass
class FanOut:
    """Publish -> receive delays of every ``session.next.*`` event on every subscriber, and for each
    event the spread between its first and last arrival."""

    delays: list[float]  # ms, one per (event, subscriber)
    spreads: list[float]  # ms, one per event
    by_type: dict[str, list[float]]
    client_cpu: float  # client CPU / wall over the measured prompts
    server_cpu: float


async def _subscribe(server: Server, count: int) -> list[Subscriber]:
    """``count`` subscribers, each connected (its ``server.connected`` frame seen) before the next."""
    loop = asyncio.get_running_loop()
    request = f"GET /api/event HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nAccept: text/event-stream\r\n\r\n".encode()
    subs: list[Subscriber] = []
    try:
        for _ in range(count):
            sub = Subscriber(request)
            connected = sub.watch(b'"server.connected"')
            subs.append(sub)
            await loop.create_connection(lambda sub=sub: sub, HOST, server.port)
            await asyncio.wait_for(connected, EVENT_TIMEOUT_S)
    except BaseException:
        _close(subs)
        raise
    return subs


def _close(subs: list[Subscriber]) -> None:
    for sub in subs:
        if sub.transport is not None:
            sub.transport.close()


async def _prompt_to_idle(client: httpx.AsyncClient, subs: list[Subscriber]) -> str:
    """One prompt on a fresh session, awaited until every subscriber has its ``session.idle``
    (every ``session.next.*`` event of the turn precedes it on each stream)."""
    response = await client.post("/api/session", json={})
    response.raise_for_status()
    session_id = str(response.json()["data"]["id"])
    idle = [sub.watch(b'"session.idle"', session_id.encode()) for sub in subs]
    response = await client.post(f"/api/session/{session_id}/prompt", json=V2_PROMPT_BODY)
    response.raise_for_status()
    response = await client.post(f"/api/session/{session_id}/wait")
    if response.status_code != 204:
        raise RuntimeError(f"wait on {session_id} -> {response.status_code}: {response.text[:300]}")
    await asyncio.wait_for(asyncio.gather(*idle), EVENT_TIMEOUT_S)
    return session_id


def _analyse(subs: list[Subscriber], measured: set[str]) -> FanOut:
    arrivals: dict[str, list[float]] = {}  # event id -> arrival on each subscriber
    stamps: dict[str, tuple[str, int]] = {}  # event id -> (type, data.timestamp)
    for sub in subs:
        for arrived, frame in sub.frames():
            data = frame.get("data") or {}
            if frame.get("type", "").startswith("session.next.") and data.get("sessionID") in measured:
                arrivals.setdefault(frame["id"], []).append(arrived)
                stamps[frame["id"]] = (frame["type"], int(data["timestamp"]))
    # A subscriber that is behind gets consecutive deltas merged into one (with the last one's
    # id), so a delta may reach fewer subscribers by design; every other event must reach all.
    missed = [
        event_id
        for event_id, times in arrivals.items()
        if len(times) != len(subs) and not stamps[event_id][0].endswith(".delta")
    ]
    if missed or not arrivals:
        raise RuntimeError(f"{len(missed)} of {len(arrivals)} events did not reach all {len(subs)} subscribers")
    result = FanOut([], [], {}, 0.0, 0.0)
    for event_id, times in arrivals.items():
        event_type, stamp = stamps[event_id]
        delays = [arrived * 1000 - stamp for arrived in times]
        result.delays.extend(delays)
        result.by_type.setdefault(event_type, []).extend(delays)
        result.spreads.append((max(times) - min(times)) * 1000)
    return result


async def _fan_out(server: Server, subscribers: int, warmup: int, prompts: int) -> FanOut:
    subs = await _subscribe(server, subscribers)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=EVENT_TIMEOUT_S, trust_env=False) as client:
            for _ in range(warmup):
                await _prompt_to_idle(client, subs)
            cpu_started, server_started, started = time.process_time(), server.cpu_seconds(), time.perf_counter()
            measured = {await _prompt_to_idle(client, subs) for _ in range(prompts)}
            wall = time.perf_counter() - started
            client_cpu, server_cpu = time.process_time() - cpu_started, server.cpu_seconds() - server_started
    finally:
        _close(subs)
    result = _analyse(subs, measured)
    result.client_cpu, result.server_cpu = client_cpu / wall, server_cpu / wall
    return result


def bench_fan_out(server: Server, subscribers: int, delay: Metric, warmup: int, prompts: int, notes: list[str]) -> None:
    # uvloop spends less per read than the stdlib loop, which with 100 sockets shows in the p99.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as runner:
        result = runner.run(_fan_out(server, subscribers, warmup, prompts))
    delay.samples = result.delays
    tails = ", ".join(
        f"{kind.removeprefix('session.next.')} {nearest_rank(samples, 0.99):.1f}"
        for kind, samples in sorted(result.by_type.items())
    )
    verdict = "the client may be limiting" if result.client_cpu >= CLIENT_BOUND_CPU else "the client is not the limit"
    spread_text = (
        f"first -> last subscriber of an event median {statistics.median(result.spreads):.2f} ms, "
        f"p99 {nearest_rank(result.spreads, 0.99):.2f} ms; "
        if subscribers > 1
        else ""
    )
    notes.append(
        f"fan-out to {subscribers}: {spread_text}p99 ms by type: {tails}; "
        f"CPU / wall: client {result.client_cpu:.0%} ({'uvloop' if uvloop else 'asyncio'}), "
        f"server {result.server_cpu:.0%} -> {verdict}"
    )


def progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


async def mcp_call_times(
    args: list[str], tool: str, arguments: dict[str, Any], count: int, warmup: int, check: Callable[[Any], None]
) -> list[float]:
    """Milliseconds of each of ``count`` calls of ``tool`` (after ``warmup`` calls) on the MCP
    server ``python ARGS`` spawned over stdio (from the repository root), each result passed to
    ``check``. The SDK is imported here: the scripts that do not use it do not load it."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=args, env={"PYTHONPATH": str(ROOT)}, cwd=ROOT)
    samples = []
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for index in range(warmup + count):
                started = time.perf_counter()
                result = await session.call_tool(tool, arguments)
                elapsed = (time.perf_counter() - started) * 1000
                check(result)
                if index >= warmup:
                    samples.append(elapsed)
    return samples


# -- main ----------------------------------------------------------------------------------------


def run(quick: bool, notes: list[str]) -> list[Metric]:
    cheap, prompts, startups, warmup = (50, 15, 3, 10) if quick else (200, 50, 5, 20)
    history = 20 if quick else 100
    replay_events, replays = (2_000, 2) if quick else (10_000, 5)
    subscribers, fan_prompts, fan_warmup = (100, 5, 2) if quick else (100, 20, 3)
    create = Metric("POST /session", "ms", 2, 8.8)
    admit = Metric("POST prompt_async -> 204", "ms", 3, 15.7)
    first_delta = Metric("prompt -> first message.part.delta", "ms", 5, 108)
    idle = Metric("prompt -> session.idle", "ms", 15, 196)
    messages = Metric(f"GET /session/:id/message ({2 * history} msgs)", "ms", 8, 21.7)
    start_fresh = Metric("start -> healthy (fresh db)", "s", 0.7, 3.4)
    start_existing = Metric("start -> healthy (existing db)", "s", 0.7, 3.4)
    rss = Metric("peak RSS (VmHWM)", "MB", 120, 883)
    v2_admit = Metric("POST /api/session/:id/prompt -> 200", "ms", 3)
    replay = Metric(f"replay /api/session/:id/event ({replay_events:,} ev)", "ev/s", 20_000, higher_is_better=True)
    fan_one = Metric("/api/event publish -> receive, 1 sub", "ms", 20, judged_on="p99")
    fan_many = Metric(f"/api/event publish -> receive, {subscribers} subs", "ms", 20, judged_on="p99")
    v2_rss = Metric("peak RSS after V2 work (VmHWM)", "MB", 120)

    with workspace("opensession-bench-") as (base, project, config):
        log = base / "server.log"

        def server(db: Path) -> Server:
            return Server(db, project, config, log)

        progress("start-up on fresh databases")
        # Cold caches would otherwise land in the first start-up sample.
        bench_startups(lambda _i: server(base / "warmup.db"), 1)
        start_fresh.samples = bench_startups(lambda i: server(base / f"fresh-{i}.db"), startups)

        main_db = base / "main.db"
        with running(server(main_db)) as srv, httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as client:
            progress(f"server at {srv.url}: POST /session")
            bench_create(client, create, warmup, cheap)
            progress("prompts on fresh sessions")
            with EventStream(srv.url) as events:
                bench_prompts(client, events, admit, first_delta, idle, warmup, prompts)
            progress(f"{history} prompts into one session, then GET its messages")
            bench_messages(client, messages, history, warmup, cheap)
            rss.value = srv.peak_rss_mb()

        progress("start-up on the existing database")
        # The database the run above filled: migrations are at head and it holds real rows.
        start_existing.samples = bench_startups(lambda _i: server(main_db), startups)

        # V2 on a server and database of its own, so the figures above stay comparable with runs
        # made before the V2 metrics existed.
        with (
            running(server(base / "v2.db")) as srv,
            httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as client,
        ):
            progress(f"V2 server at {srv.url}: POST /api/session/:id/prompt on fresh sessions")
            bench_v2_prompts(client, v2_admit, warmup, prompts)
            progress(f"fan-out: {fan_prompts} prompts to 1, then to {subscribers} subscribers of /api/event")
            bench_fan_out(srv, 1, fan_one, fan_warmup, fan_prompts, notes)
            bench_fan_out(srv, subscribers, fan_many, fan_warmup, fan_prompts, notes)
            progress(f"replay: a session of {replay_events:,} durable events, read {replays} times from after=0")
            bench_replay(client, srv, replay, replay_events, replays, notes)
            v2_rss.value = srv.peak_rss_mb()

    return [
        create,
        admit,
        first_delta,
        idle,
        messages,
        start_fresh,
        start_existing,
        rss,
        v2_admit,
        replay,
        fan_one,
        fan_many,
        v2_rss,
    ]


def speed_probe_ms() -> float:
    """CPU milliseconds of a fixed pure-Python loop, the best of three: the machine's speed now.
    A VM's speed drifts (this development machine's by up to 2x within minutes), and the probe
    printed with a run's figures says which runs may be compared."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for i in range(300_000):
            total += i * i % 7
        best = min(best, time.process_time() - started)
    return best * 1000


def cli(
    run: Callable[[bool, list[str]], list[Metric]],
    description: str,
    argv: list[str] | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> int:
    """The command line every benchmark script shares: options, load average, table, notes, JSON.
    ``run(quick, notes)`` measures and returns the metrics in table order. ``parents`` are a
    script's own options (it reads them itself; here they are only listed by ``--help``)."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0], parents=list(parents))
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run, noisier figures)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)

    # SIGTERM (e.g. from a CI timeout) unwinds like Ctrl-C, so the server and temp files go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before, speed_before = os.getloadavg(), speed_probe_ms()
    notes: list[str] = []
    metrics = run(args.quick, notes)
    load_after, speed_after = os.getloadavg(), speed_probe_ms()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after (other load skews the figures); "
        f"speed probe {speed_before:.0f} / {speed_after:.0f} ms (only runs with close probes compare)"
    )
    print_table(metrics)
    for note in notes:
        print(f"- {note}")
    if args.json:
        payload = {
            "quick": args.quick,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "speed_probe_ms": [speed_before, speed_after],
            "metrics": [m.as_dict() for m in metrics],
            "notes": notes,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
