"""Cluster benchmark: 50 concurrent sessions on PostgreSQL with one and with two server processes
(and on SQLite with one, for reference), driven through ``prompt_async`` as a busy shared server
sees them.

For each configuration: admitted prompts/s, completed turns/s, accept latency (p50/p99), server
CPU per turn, and, on PostgreSQL, database statements per turn (``pg_stat_statements``). With two
processes also: cross-process event delivery (``/api/event`` on process B for prompts sent to
process A: arrival minus the event's timestamp) and the takeover time after ``kill -9`` of the
process draining a session (until the other process has answered its prompt).

PostgreSQL is a throw-away cluster started from the system's binaries (as the tests do), with
``synchronous_commit=off`` (no fsync at commit, like SQLite's WAL with ``synchronous=NORMAL``).
Everything runs on 127.0.0.1 and is removed on exit. Run from the repository root::

    python bench/cluster.py [--quick] [--json results.json]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench import ROOT, Metric, Server, cli, progress, workspace

sys.path.insert(1, str(ROOT))  # after bench/: ``tests.postgres`` starts the throw-away cluster

from tests.postgres import Cluster, start_cluster

SESSIONS = 50
STATEMENT_STATS = "-c shared_preload_libraries=pg_stat_statements -c fsync=on -c full_page_writes=on"
LEASE_SECONDS = "5"


@contextmanager
def servers(db: str, count: int, base: Path, project: Path, config: Path) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        started = []
        for index in range(count):
            server = Server(Path(db), project, config, base / f"server-{index}.log")
            server.args[server.args.index("--db") + 1] = db  # a URL, not a path
            server.env["OPENSESSION_LEASE_SECONDS"] = LEASE_SECONDS
            stack.callback(server.stop)
            server.start()
            started.append(server)
        yield started


async def _drive(urls: list[str], prompts_per_session: int) -> tuple[list[float], float, float, int]:
    """Create the sessions, send every prompt concurrently (round-robin over ``urls``), wait until
    all are answered. Returns accept latencies (ms), seconds to admit all, seconds to answer all,
    and the number of answers."""
    limits = httpx.Limits(max_connections=SESSIONS * 2, max_keepalive_connections=SESSIONS * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        sids = [(await client.post(f"{urls[0]}/session")).json()["id"] for _ in range(SESSIONS)]
        latencies: list[float] = []

        async def send(index: int, sid: str) -> None:
            url = urls[index % len(urls)]
            started = time.perf_counter()
            response = await client.post(
                f"{url}/session/{sid}/prompt_async", json={"parts": [{"type": "text", "text": f"hi {index}"}]}
            )
            latencies.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 204, response.text

        started = time.perf_counter()
        await asyncio.gather(*(send(i, sid) for i in range(prompts_per_session) for sid in sids))
        admitted = time.perf_counter() - started
        await asyncio.gather(
            *(client.post(f"{urls[i % len(urls)]}/api/session/{sid}/wait") for i, sid in enumerate(sids))
        )
        answered_in = time.perf_counter() - started
        answers = 0
        for sid in sids:
            history = (await client.get(f"{urls[0]}/session/{sid}/message")).json()
            answers += sum(1 for m in history if m["info"]["role"] == "assistant" and "completed" in m["info"]["time"])
        return latencies, admitted, answered_in, answers


def _statements(cluster: Cluster, db: str) -> int:
    import asyncpg

    async def read() -> int:
        conn = await asyncpg.connect(f"{cluster.url}/{db.rsplit('/', 1)[1]}")
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            return int(
                await conn.fetchval(
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            )
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


def _takeover(a: Server, b: Server) -> float:
    """Seconds from kill -9 of the process draining a session to the other's answer."""
    with httpx.Client(timeout=30, trust_env=False) as client:
        sid = client.post(f"{a.url}/session").json()["id"]
        client.post(f"{a.url}/session/{sid}/prompt_async", json={"parts": [{"type": "text", "text": "SLOW:0.5 long"}]})
        time.sleep(0.4)  # streaming on A (a prompt sent to A is drained by A)
        assert a.proc is not None
        killed = time.perf_counter()
        a.proc.kill()
        a.proc.wait()
        while time.perf_counter() - killed < 60:
            history = client.get(f"{b.url}/session/{sid}/message").json()
            if any(
                m["info"]["role"] == "assistant" and "error" not in m["info"] and "completed" in m["info"]["time"]
                for m in history
            ):
                return time.perf_counter() - killed
            time.sleep(0.05)
    raise TimeoutError("no takeover within 60 s")


def run(quick: bool, notes: list[str]) -> list[Metric]:
    per_session = 2 if quick else 6
    metrics: list[Metric] = []
    cluster = start_cluster(STATEMENT_STATS)
    if cluster is None:
        raise SystemExit("PostgreSQL is not installed here (apt-get install postgresql)")
    try:
        for engine, count in (("sqlite", 1), ("postgres", 1), ("postgres", 2)):
            label = f"{engine} x{count}"
            progress(f"{label}: {SESSIONS} sessions x {per_session} prompts")
            with workspace("opensession-cluster-") as (base, project, config):
                db = str(base / "bench.db") if engine == "sqlite" else cluster.create_database()
                with servers(db, count, base, project, config) as procs:
                    before = _statements(cluster, db) if engine == "postgres" else 0
                    cpu_before = sum(p.cpu_seconds() for p in procs)
                    latencies, admitted_s, answered_s, answers = asyncio.run(
                        _drive([p.url for p in procs], per_session)
                    )
                    cpu = sum(p.cpu_seconds() for p in procs) - cpu_before
                    prompts = SESSIONS * per_session
                    if answers != prompts:
                        notes.append(f"{label}: {answers} answers for {prompts} prompts")
                    accept = Metric(
                        f"{label}: accept (prompt_async -> 204)", "ms", 1000.0, samples=latencies, judged_on="p99"
                    )
                    metrics.append(accept)
                    notes.append(
                        f"{label}: {prompts / admitted_s:.0f} prompts/s admitted, {answers / answered_s:.0f} turns/s "
                        f"completed, {cpu / max(answers, 1) * 1000:.1f} ms server CPU per turn"
                        + (
                            f", {(_statements(cluster, db) - before) / max(answers, 1):.1f} statements per turn"
                            if engine == "postgres"
                            else ""
                        )
                    )
                    if count == 2:
                        progress("cross-process event delivery")
                        delivery = Metric("postgres x2: event A -> B (/api/event)", "ms", 50.0, judged_on="p99")
                        delivery.samples = _cross_process_latency(procs[0].url, procs[1].url, 5 if quick else 20)
                        metrics.append(delivery)
                        progress("takeover after kill -9")
                        takeover = Metric(f"postgres x2: takeover after kill -9 (lease {LEASE_SECONDS} s)", "s", 10.0)
                        takeover.samples = [_takeover(procs[0], procs[1])]
                        metrics.append(takeover)
    finally:
        cluster.stop()
    return metrics


if __name__ == "__main__":
    sys.exit(cli(run, __doc__ or ""))
