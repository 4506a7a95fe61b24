"""Latency, start-up and memory benchmark of ``opensession serve`` against its targets.

The server runs as a real subprocess (``python -m app.cli serve``) bound to 127.0.0.1 on a free
port, with a throw-away database, project directory and config directory, so the figures include
uvicorn, the HTTP stack and SQLite exactly as a client sees them, and nothing on this machine
(an ``opencode.json``, an old database) changes the result. Everything is cleaned up on exit.

Run from the repository root::

    python bench/bench.py [--quick] [--json results.json]
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
PROMPT_BODY = {"parts": [{"type": "text", "text": "hi"}]}
HEALTH_TIMEOUT_S = 30.0
EVENT_TIMEOUT_S = 10.0


# -- results ------------------------------------------------------------------------------------


@dataclass
class Metric:
    """One measured figure with its target and the real OpenCode figure for reference."""

    name: str
    unit: str  # "ms", "s" or "MB"
    target: float
    opencode: float
    samples: list[float] = field(default_factory=list)
    value: float | None = None  # for single readings (memory); otherwise derived from samples

    @property
    def median(self) -> float:
        return self.value if self.value is not None else statistics.median(self.samples)

    @property
    def p90(self) -> float | None:
        if self.value is not None or not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]  # nearest rank

    @property
    def ok(self) -> bool:
        return self.median <= self.target

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(median=self.median, p90=self.p90, ok=self.ok, n=len(self.samples) or 1)
        return data


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:.2f} ms"


def print_table(metrics: list[Metric]) -> None:
    headers = ("metric", "n", "median", "p90", "target", "OpenCode", "")
    rows = [
        (
            m.name,
            str(len(m.samples) or 1),
            _fmt(m.median, m.unit),
            _fmt(m.p90, m.unit),
            "<= " + _fmt(m.target, m.unit),
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


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM if the benchmark itself is killed, so none is left behind."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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
        # An empty config dir keeps a user's opencode.json from changing the default (echo) model.
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "OPENSESSION_CONFIG_DIR": str(config_dir),
            "PYTHONUNBUFFERED": "1",
        }
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Spawn and poll ``/global/health``; returns seconds from spawn to the first 200."""
        with self.log_path.open("ab") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, env=self.env, stdout=log, stderr=log, preexec_fn=_die_with_parent
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


def progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


# -- main ----------------------------------------------------------------------------------------


def run(quick: bool) -> list[Metric]:
    cheap, prompts, startups, warmup = (50, 15, 3, 10) if quick else (200, 50, 5, 20)
    history = 20 if quick else 100
    create = Metric("POST /session", "ms", 2, 8.8)
    admit = Metric("POST prompt_async -> 204", "ms", 3, 15.7)
    first_delta = Metric("prompt -> first message.part.delta", "ms", 5, 108)
    idle = Metric("prompt -> session.idle", "ms", 15, 196)
    messages = Metric(f"GET /session/:id/message ({2 * history} msgs)", "ms", 8, 21.7)
    start_fresh = Metric("start -> healthy (fresh db)", "s", 0.7, 3.4)
    start_existing = Metric("start -> healthy (existing db)", "s", 0.7, 3.4)
    rss = Metric("peak RSS (VmHWM)", "MB", 120, 883)

    with tempfile.TemporaryDirectory(prefix="opensession-bench-") as tmp:
        base = Path(tmp)
        project, config = base / "project", base / "config"
        project.mkdir()
        config.mkdir()
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

    return [create, admit, first_delta, idle, messages, start_fresh, start_existing, rss]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run, noisier figures)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)

    # SIGTERM (e.g. from a CI timeout) unwinds like Ctrl-C, so the server and temp files go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before = os.getloadavg()
    metrics = run(args.quick)
    load_after = os.getloadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after (other load skews the figures)"
    )
    print_table(metrics)
    if args.json:
        payload = {
            "quick": args.quick,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "metrics": [m.as_dict() for m in metrics],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
