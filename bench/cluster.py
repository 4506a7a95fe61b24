"""Cluster benchmark: 60 concurrent sessions (``--sessions``) x 5 prompts (``--prompts``) on
PostgreSQL with one, two and three server processes (and on SQLite with one, for reference), driven through
``prompt_async`` as a busy shared server sees them, over a delayed link to the database. Each
configuration first answers a warm-up burst (one prompt on each of as many sessions of its own), so
the figures are those of a server that has run a while: connections open, statements prepared.

The servers reach PostgreSQL through ``bench/delay_proxy.py``, which holds every chunk
``--rtt-ms / 2`` in each direction (default 1 ms round trip, a database in the next rack; this
kernel has no netem). For each configuration: a lone prompt's reply on the idle server (one
session, prompts one after another), then under the burst: admitted prompts/s, completed turns/s, accept
latency (p50/p99), each reply's wait (from when its session could begin it: its prompt created or
the session's previous reply done, whichever is later, to its completion), server CPU and context
switches per turn, the client's and the delay proxy's CPU (they share the machine) and, on
PostgreSQL, per turn:
round trips (chunks the servers sent through the proxy), commits and statements
(``pg_stat_statements``). With two or more processes also: cross-process event delivery
(``/api/event`` on process B for prompts sent to process A: arrival minus the event's timestamp),
how long after its reply a sync prompt sent to B answers while A drains the session, and the
takeover time after SIGTERM and after ``kill -9`` of the process draining a session. And each
prompt's accept latency and reply wait when prompts arrive at a steady ``--paced-rate`` (default
50/s, the aimed turns/s) over fresh sessions for 4 s. The burst keeps every session's next turn waiting, so
its reply median is mostly queueing (about sessions / turns per second); the paced figure is a
turn's own time on a server at the load it is sized for.

With ``--nginx`` every client request goes through the shipped ``deploy/nginx.conf`` (as a
deployment runs it: round-robin over the processes, per request) instead of to the processes in
turn, and its CPU per turn is reported too; the cross-process and takeover figures still address
the processes themselves.

PostgreSQL is a throw-away cluster started from the system's binaries (as the tests do).
Everything runs on 127.0.0.1 and is removed on exit. Run from the repository root::

    python bench/cluster.py [--quick] [--rtt-ms 1.0] [--processes 1,2,3] [--sessions 60] [--prompts 5]
                            [--nginx] [--profile DIR] [--json results.json]

A server's CPU per turn falls as its load rises (a busy event loop does more per wake-up), so
``--sessions 30 --processes 1`` shows what each of two processes sharing 60 sessions costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import ROOT, Metric, Poster, Server, cli, progress, workspace

sys.path.insert(1, str(ROOT))  # after bench/: ``tests.postgres`` starts the throw-away cluster

from tests.balancer import nginx_binary, shipped_nginx
from tests.postgres import Cluster, start_cluster

SESSIONS = 60
PROMPTS = 5
PACED_RATE = 50.0
PACED_SECONDS = 4.0
OPTIONS = argparse.ArgumentParser(add_help=False)
OPTIONS.add_argument("--rtt-ms", type=float, default=1.0, help="round trip added to the database link (default 1.0)")
OPTIONS.add_argument("--processes", default="1,2,3", help="PostgreSQL process counts to run (default 1,2,3)")
OPTIONS.add_argument("--sessions", type=int, default=SESSIONS, help=f"concurrent sessions (default {SESSIONS})")
OPTIONS.add_argument(
    "--prompts", type=int, default=PROMPTS, help=f"prompts per session (default {PROMPTS}; --quick: 2)"
)
OPTIONS.add_argument(
    "--paced-rate",
    type=float,
    default=PACED_RATE,
    help=f"prompts/s of the paced run (default {PACED_RATE:g}, the aimed turns/s)",
)
OPTIONS.add_argument(
    "--nginx",
    action="store_true",
    help="send clients' requests through the shipped deploy/nginx.conf (round-robin), not to each process in turn",
)
OPTIONS.add_argument(
    "--profile",
    type=Path,
    help="record each server with py-spy during the counted burst, as DIR/<configuration>-<n>.raw (collapsed stacks)",
)
STATEMENT_STATS = "-c shared_preload_libraries=pg_stat_statements -c fsync=on -c full_page_writes=on"


@contextmanager
def _profiled(procs: list[Server], label: str, directory: Path | None) -> Iterator[None]:
    """py-spy recording each of ``procs`` (without pausing it) while the block runs, when
    ``directory`` is given: where a configuration's CPU per turn goes."""
    if directory is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise SystemExit("--profile needs py-spy beside this Python (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    recorders = []
    for n, proc in enumerate(procs):
        assert proc.proc is not None
        output = directory / f"{label.replace(' ', '-')}-{n}.raw"
        command = [str(spy), "record", "--nonblocking", "--rate", "250", "--format", "raw", "-o", str(output)]
        command += ["--pid", str(proc.proc.pid)]
        recorders.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.5)  # py-spy attaches
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # it writes what it recorded, then exits
        for recorder in recorders:
            recorder.wait(30)


@contextmanager
def servers(db: str, count: int, base: Path, project: Path, config: Path) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        started = []
        for index in range(count):
            server = Server(Path(db), project, config, base / f"server-{index}.log")
            server.args[server.args.index("--db") + 1] = db  # a URL, not a path
            stack.callback(server.stop)
            server.start()
            started.append(server)
        yield started


@dataclass
class Drive:
    accept_ms: list[float]  # prompt_async -> 204
    admitted_s: float
    answered_s: float


@dataclass(frozen=True)
class Burst:
    sessions: int
    prompts: int  # per session
    paced_rate: float  # prompts/s of the paced run after the burst


def _sessions(url: str, count: int) -> list[str]:
    """The sessions the burst prompts, created before anything is counted (not part of a turn)."""
    with httpx.Client(timeout=60, trust_env=False) as client:
        return [client.post(f"{url}/session").json()["id"] for _ in range(count)]


async def _drive(urls: list[str], sids: list[str], prompts_per_session: int) -> Drive:
    """Send every prompt to ``sids`` concurrently (round-robin over ``urls``) and wait until all
    are answered."""
    limits = httpx.Limits(max_connections=len(sids) * 2, max_keepalive_connections=len(sids) * 2)
    async with httpx.AsyncClient(timeout=300, limits=limits, trust_env=False) as client:
        latencies: list[float] = []

        # The prompts go through light keep-alive connections (``Poster``), one per session and
        # process: httpx's pool cost this client most of a CPU under the burst, on a machine whose
        # two CPUs the servers, PostgreSQL and the delay proxy share.
        ports = [int(url.rsplit(":", 1)[1]) for url in urls]
        posters = {(sid, port): await Poster(port).connect() for sid in sids for port in dict.fromkeys(ports)}
        in_order = {key: asyncio.Lock() for key in posters}  # one request at a time per connection

        # Like a round-robin balancer, each session's prompts go to the processes in turn, and
        # its first prompt (whose process claims the session's drain) to the next process after
        # the previous session's: sessions are spread over the processes, not all drained by one.
        async def send(index: int, position: int, sid: str) -> None:
            key = (sid, ports[(index + position) % len(ports)])
            async with in_order[key]:
                started = time.perf_counter()
                status, body = await posters[key].post(
                    f"/session/{sid}/prompt_async", {"parts": [{"type": "text", "text": f"hi {index}"}]}
                )
                latencies.append((time.perf_counter() - started) * 1000)
            assert status == 204, body

        started = time.perf_counter()
        await asyncio.gather(
            *(send(i, position, sid) for i in range(prompts_per_session) for position, sid in enumerate(sids))
        )
        admitted = time.perf_counter() - started
        for poster in posters.values():
            poster.close()
        await _all_idle(client, urls, sids)
        return Drive(latencies, admitted, time.perf_counter() - started)


async def _paced(urls: list[str], sids: list[str], rate: float, seconds: float) -> list[float]:
    """Prompts at a steady ``rate`` per second for ``seconds``, each to the next of ``sids`` in
    turn (round-robin over ``urls``), then wait until all are answered: the load a server is
    sized for, not the most it can take, so each reply's wait is the turn's own time and not a
    queue's. Returns each prompt's accept latency (ms)."""
    ports = [int(url.rsplit(":", 1)[1]) for url in urls]
    posters = [await Poster(ports[i % len(ports)]).connect() for i in range(len(sids))]
    in_order = [asyncio.Lock() for _ in sids]

    accepts: list[float] = []

    async def send(index: int) -> None:
        position = index % len(sids)
        async with in_order[position]:
            asked = time.perf_counter()
            status, body = await posters[position].post(
                f"/session/{sids[position]}/prompt_async", {"parts": [{"type": "text", "text": f"paced {index}"}]}
            )
            accepts.append((time.perf_counter() - asked) * 1000)
        assert status == 204, body

    started, sent = time.perf_counter(), []
    for index in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
        sent.append(asyncio.ensure_future(send(index)))
    await asyncio.gather(*sent)
    for poster in posters:
        poster.close()
    async with httpx.AsyncClient(timeout=300, trust_env=False) as client:
        await _all_idle(client, urls, sids)
    return accepts


async def _all_idle(client: httpx.AsyncClient, urls: list[str], sids: list[str]) -> None:
    """Until every one of ``sids`` has answered all it was sent (``/wait``, round-robin over ``urls``)."""
    await asyncio.gather(*(client.post(f"{urls[i % len(urls)]}/api/session/{sid}/wait") for i, sid in enumerate(sids)))


def _replies(url: str, sids: list[str]) -> list[float]:
    """Every reply's wait (``_reply_times``), read back from the transcripts once counting is
    over (reading them is no part of a turn)."""
    with httpx.Client(timeout=60, trust_env=False) as client:
        return [wait for sid in sids for wait in _reply_times(client.get(f"{url}/session/{sid}/message").json())]


def _reply_times(history: list[dict[str, Any]]) -> list[float]:
    """Each reply's wait, in ms (server clock): from the moment it could begin (its prompt
    created, or the session's previous reply completed, whichever is later: a session answers its
    prompts one after another) to its completion. A burst queues several prompts per session, and
    timing each from its own creation would count the replies before it in its session."""
    asked = {m["info"]["id"]: m["info"]["time"]["created"] for m in history if m["info"]["role"] == "user"}
    waits, previous = [], 0
    for message in history:
        info = message["info"]
        if info["role"] == "assistant" and "completed" in info["time"]:
            waits.append(info["time"]["completed"] - max(asked[info["parentID"]], previous))
            previous = info["time"]["completed"]
    return waits


class DelayedLink:
    """``bench/delay_proxy.py`` in front of PostgreSQL, as a process of its own."""

    def __init__(self, cluster: Cluster, rtt_ms: float, stats: Path) -> None:
        target = cluster.url.rsplit("@", 1)[1]
        self.stats = stats
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "delay_proxy.py"),
                "--target",
                target,
                "--delay-ms",
                str(rtt_ms / 2),
                "--stats",
                str(stats),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def url(self, db: str) -> str:
        """``db`` (a database URL on the cluster) reached through the link."""
        head, name = db.rsplit("/", 1)
        return f"{head.rsplit(':', 1)[0]}:{self.port}/{name}"

    def cpu_seconds(self) -> float:
        """The proxy's own CPU (user + system): on a small machine it competes with the servers."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def round_trips(self) -> int:
        self.stats.unlink(missing_ok=True)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not self.stats.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.01)
        return int(self.stats.read_text().split()[0])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _postgres_cpu(cluster: Cluster) -> float:
    """CPU seconds (user + system) of the PostgreSQL server: the postmaster, its live children
    (the servers' backends, the WAL writer...) and the children it has reaped."""
    assert cluster._directory is not None
    return _family_cpu(int((cluster._directory / "data" / "postmaster.pid").read_text().split()[0]))


def _family_cpu(parent: int) -> float:
    """CPU seconds (user + system) of process ``parent``, its live children and those it reaped."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        pid = int(stat.parent.name)
        if pid == parent:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif int(fields[1]) == parent:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _counters(cluster: Cluster, db: str) -> tuple[int, int]:
    """Statements and COMMITs run so far on ``db`` (``pg_stat_statements``)."""
    import asyncpg

    async def read() -> tuple[int, int]:
        conn = await asyncpg.connect(f"{cluster.url}/{db.rsplit('/', 1)[1]}")
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            row = await conn.fetchrow(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(calls) FILTER (WHERE query ILIKE 'commit%'), 0) "
                "FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            assert row is not None
            return int(row[0]), int(row[1])
        finally:
            await conn.close()

    return asyncio.run(read())


def _cross_process_latency(a: str, b: str, prompts: int) -> list[float]:
    """Prompts sent to process A; every ``session.next.*`` event as it arrives on B's /api/event."""
    samples: list[float] = []

    async def run() -> None:
        async with (
            httpx.AsyncClient(timeout=60, trust_env=False) as client,
            client.stream("GET", f"{b}/api/event") as stream,
        ):
            sid = (await client.post(f"{a}/session")).json()["id"]

            async def read() -> None:
                async for line in stream.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    event = json.loads(line[5:])
                    data = event.get("data") or {}
                    if str(event.get("type", "")).startswith("session.next.") and data.get("sessionID") == sid:
                        samples.append(time.time() * 1000 - data["timestamp"])

            reader = asyncio.create_task(read())
            for index in range(prompts):
                body = {"parts": [{"type": "text", "text": f"x {index}"}]}
                await client.post(f"{a}/session/{sid}/message", json=body)
            await asyncio.sleep(0.5)
            reader.cancel()

    asyncio.run(run())
    return samples


def _lone_replies(url: str, count: int = 20) -> list[float]:
    """A prompt's wait on an otherwise idle server (ms, as the client sees it): one session's
    prompts sent one after another with ``POST /session/:id/message``, which answers with the
    reply once it is complete."""
    samples: list[float] = []
    with httpx.Client(timeout=30, trust_env=False) as client:
        sid = client.post(f"{url}/session").json()["id"]
        for index in range(count):
            started = time.perf_counter()
            answer = client.post(f"{url}/session/{sid}/message", json={"parts": [{"type": "text", "text": f"{index}"}]})
            samples.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, answer.text
    return samples


def _hand_back(a: str, b: str, count: int = 10) -> list[float]:
    """A sync prompt sent to B while A drains its session (a slow prompt first, sent to A): how
    long after A completed B's reply (its ``time.completed``) B answers the call, in ms."""
    samples: list[float] = []
    with httpx.Client(timeout=30, trust_env=False) as client:
        for index in range(count):
            sid = client.post(f"{a}/session").json()["id"]
            slow = {"parts": [{"type": "text", "text": "SLOW:0.2 drained by A"}]}
            assert client.post(f"{a}/session/{sid}/prompt_async", json=slow).status_code == 204
            time.sleep(0.05)  # A is draining it
            answer = client.post(f"{b}/session/{sid}/message", json={"parts": [{"type": "text", "text": f"{index}"}]})
            answered_ms = time.time() * 1000
            assert answer.status_code == 200, answer.text
            samples.append(answered_ms - answer.json()["info"]["time"]["completed"])
    return samples


def _takeover(a: Server, b: Server, how: signal.Signals) -> float:
    """Seconds from the signal ``how`` (SIGKILL or SIGTERM) to the process draining a session
    until the other has begun its reply (the prompt's slow stream left out)."""
    with httpx.Client(timeout=30, trust_env=False) as client:
        sid = client.post(f"{a.url}/session").json()["id"]
        client.post(f"{a.url}/session/{sid}/prompt_async", json={"parts": [{"type": "text", "text": "SLOW:0.5 long"}]})
        time.sleep(0.4)  # streaming on A (a prompt sent to A is drained by A)
        assert a.proc is not None
        killed = time.perf_counter()
        a.proc.send_signal(how)
        a.proc.wait()
        while time.perf_counter() - killed < 60:
            history = client.get(f"{b.url}/session/{sid}/message").json()
            if sum(m["info"]["role"] == "assistant" for m in history) >= 2:  # the other's reply has begun
                return time.perf_counter() - killed
            time.sleep(0.05)
    raise TimeoutError("no takeover within 60 s")


def _measure(
    label: str,
    db: str,
    count: int,
    burst: Burst,
    cluster: Cluster,
    link: DelayedLink | None,
    nginx: Path | None,
    notes: list[str],
    profile: Path | None = None,
) -> list[Metric]:
    """One configuration's figures. With ``nginx``, the clients' requests go through the shipped
    configuration in front of the processes; without, to the processes in turn."""
    metrics: list[Metric] = []
    per_session = burst.prompts
    progress(f"{label}: {burst.sessions} sessions x {per_session} prompts")
    with workspace("opensession-cluster-") as (base, project, config):
        served = link.url(db) if link is not None else db
        with servers(served, count, base, project, config) as procs, ExitStack() as front:
            entries = [p.url for p in procs]
            balancer = None
            if nginx is not None:
                addresses = [p.url.removeprefix("http://") for p in procs]
                balancer = front.enter_context(shipped_nginx(nginx, addresses, base / "nginx"))
                entries = [balancer.url]
            # A warm-up burst on sessions of its own first, as a server that has run a while is:
            # its connections to the database open, its statements prepared, its caches filled.
            asyncio.run(_drive(entries, _sessions(entries[0], burst.sessions), 1))
            lone = Metric(f"{label}: lone reply (POST /message, idle server)", "ms", 150.0)
            lone.samples = _lone_replies(entries[0])
            metrics.append(lone)
            sids = _sessions(entries[0], burst.sessions)
            before = _counters(cluster, db) if link is not None else (0, 0)
            trips_before = link.round_trips() if link is not None else 0
            cpu_before = [p.cpu_seconds() for p in procs]
            switches_before = [p.switches() for p in procs]
            proxy_before = link.cpu_seconds() if link is not None else 0.0
            postgres_before = _postgres_cpu(cluster) if link is not None else 0.0
            nginx_before = _family_cpu(balancer.pid) if balancer is not None else 0.0
            client_before, wall_before = time.process_time(), time.perf_counter()
            with _profiled(procs, label, profile):
                drive = asyncio.run(_drive(entries, sids, per_session))
            client_share = (time.process_time() - client_before) / (time.perf_counter() - wall_before)
            cpu_each = [p.cpu_seconds() - first for p, first in zip(procs, cpu_before, strict=True)]
            switches = list(zip([p.switches() for p in procs], switches_before, strict=True))
            switched = sum(sum(after) - sum(first) for after, first in switches)
            lost_core = sum(after[1] - first[1] for after, first in switches)
            cpu = sum(cpu_each)
            nginx_cpu = _family_cpu(balancer.pid) - nginx_before if balancer is not None else 0.0
            if link is not None:
                trips = link.round_trips() - trips_before
                statements, commits = (
                    after - first for after, first in zip(_counters(cluster, db), before, strict=True)
                )
                proxy_cpu = link.cpu_seconds() - proxy_before
                postgres_cpu = _postgres_cpu(cluster) - postgres_before
            reply_ms = _replies(entries[0], sids)
            prompts = burst.sessions * per_session
            answers = max(len(reply_ms), 1)
            if len(reply_ms) != prompts:
                notes.append(f"{label}: {len(reply_ms)} answers for {prompts} prompts")
            metrics.append(
                Metric(f"{label}: accept (prompt_async -> 204)", "ms", 1000.0, samples=drive.accept_ms, judged_on="p99")
            )
            metrics.append(Metric(f"{label}: reply (could begin -> answered)", "ms", 150.0, samples=reply_ms))
            note = (
                f"{label}: {prompts / drive.admitted_s:.0f} prompts/s admitted, {len(reply_ms) / drive.answered_s:.1f} "
                f"turns/s completed, {cpu / answers * 1000:.1f} ms server CPU per turn, client CPU "
                f"{client_share:.0%} of the wall time"
            )
            note += (
                f", {switched / answers:.1f} context switches per turn in the servers"
                f" ({lost_core / answers:.1f} of them a runnable thread losing its core)"
            )
            if count >= 2:  # how evenly the processes share the work
                note += " (" + " / ".join(f"{c / max(cpu, 1e-9):.0%}" for c in cpu_each) + " by process)"
            if balancer is not None:
                note += f", nginx {nginx_cpu / answers * 1000:.1f} ms CPU per turn"
            if link is not None:
                note += (
                    f", PostgreSQL {postgres_cpu / answers * 1000:.1f} ms and delay proxy"
                    f" {proxy_cpu / answers * 1000:.1f} ms CPU per turn"
                    f", per turn: {trips / answers:.1f} round trips, {commits / answers:.1f} commits, "
                    f"{statements / answers:.1f} statements"
                )
            notes.append(note)
            # A steady load after the burst, through the same entries as the burst's prompts.
            progress(f"{label}: {burst.paced_rate:g} prompts/s for {PACED_SECONDS:g} s")
            paced_sids = _sessions(entries[0], burst.sessions)
            paced_accepts = Metric(f"{label}: accept at {burst.paced_rate:g} prompts/s", "ms", 1000.0, judged_on="p99")
            paced_accepts.samples = asyncio.run(_paced(entries, paced_sids, burst.paced_rate, PACED_SECONDS))
            paced = Metric(f"{label}: reply at {burst.paced_rate:g} prompts/s (asked -> answered)", "ms", 150.0)
            paced.samples = _replies(entries[0], paced_sids)
            metrics += [paced_accepts, paced]
            if count >= 2:
                progress("cross-process event delivery")
                delivery = Metric(f"{label}: event A -> B (/api/event)", "ms", 50.0, judged_on="p99")
                delivery.samples = _cross_process_latency(
                    procs[0].url, procs[1].url, 5 if per_session < PROMPTS else 20
                )
                metrics.append(delivery)
                progress("sync prompt answered through the other process")
                handed_back = Metric(f"{label}: sync prompt via B, A drains (lag after the reply)", "ms", 50.0)
                handed_back.samples = _hand_back(procs[0].url, procs[1].url)
                metrics.append(handed_back)
                progress("takeover after SIGTERM")
                handed = Metric(f"{label}: takeover after SIGTERM (default lease)", "s", 1.0)
                handed.samples = [_takeover(procs[0], procs[1], signal.SIGTERM)]
                procs[0].start()
                progress("takeover after kill -9")
                takeover = Metric(f"{label}: takeover after kill -9 (default lease)", "s", 10.0)
                takeover.samples = [_takeover(procs[1], procs[0], signal.SIGKILL)]
                metrics += [handed, takeover]
    return metrics


def run(quick: bool, notes: list[str]) -> list[Metric]:
    options, _ = OPTIONS.parse_known_args()
    burst = Burst(options.sessions, 2 if quick else options.prompts, options.paced_rate)
    counts = [int(n) for n in options.processes.split(",")]
    nginx = nginx_binary() if options.nginx else None
    if options.nginx and nginx is None:
        raise SystemExit("nginx is not installed here (apt-get install nginx)")
    cluster = start_cluster(STATEMENT_STATS)
    if cluster is None:
        raise SystemExit("PostgreSQL is not installed here (apt-get install postgresql)")
    metrics: list[Metric] = []
    with ExitStack() as stack:
        stack.callback(cluster.stop)
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="opensession-link-")))
        link = DelayedLink(cluster, options.rtt_ms, base / "stats")
        stack.callback(link.stop)
        notes.append(f"PostgreSQL reached through a link adding {options.rtt_ms} ms per round trip")
        if nginx is not None:
            notes.append("clients' requests sent through deploy/nginx.conf (round-robin over the processes)")
        with workspace("opensession-cluster-sqlite-") as (sqlite_base, _, _):
            metrics += _measure("sqlite x1", str(sqlite_base / "bench.db"), 1, burst, cluster, None, nginx, notes)
        for count in counts:
            label, database = f"postgres x{count}", cluster.create_database()
            metrics += _measure(label, database, count, burst, cluster, link, nginx, notes, options.profile)
    return metrics


if __name__ == "__main__":
    sys.exit(cli(run, __doc__ or "", parents=[OPTIONS]))
