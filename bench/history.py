"""History benchmark of ``opensession serve``: newest-page reads on long sessions, and a fork.

Sessions of 1,000, 10,000 and 100,000 messages are written before the server starts, by
``bench/seed_history.py`` in a process of its own through the project's runtime (the HTTP API
would take far too long for 100,000 messages). The server then runs as in ``bench/bench.py``
(subprocess, 127.0.0.1, free port, throw-away database and config) and is measured as a client
sees it. A newest page should cost the same on every session length, so besides the absolute
target the run judges the 100k / 1k ratio of the medians. Everything is cleaned up on exit.

Run from the repository root::

    python bench/history.py [--quick] [--json results.json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench import ROOT, Metric, Server, child_env, cli, die_with_parent, progress, running, timed, workspace

SIZES = (1_000, 10_000, 100_000)
FORK_SIZE = 10_000
PAGE = 50
PAGE_TARGET_MS = 5.0
FLAT_RATIO = 1.5  # the largest session's median page time over the smallest's
FORK_TARGET_S = 1.0
SEED_TIMEOUT_S = 900.0  # 100,000 messages take about half a minute; stop a runaway seeding
FORK_TIMEOUT_S = 120.0


@dataclass
class Seeded:
    """A session written by the seeder: its id, length and newest message (checked on the pages)."""

    id: str
    messages: int
    newest: str
    seconds: float


def seed(db: Path, project: Path, config: Path, sizes: list[int], notes: list[str]) -> dict[int, Seeded]:
    """Run the seeder as a child process (the server must be the only writer once it starts) and
    return the sessions by length."""
    args = [sys.executable, str(ROOT / "bench" / "seed_history.py"), "--db", str(db)]
    args += ["--directory", str(project), "--config-dir", str(config), *map(str, sizes)]
    started = time.perf_counter()
    done = subprocess.run(
        args,
        cwd=ROOT,
        env=child_env(config),
        capture_output=True,
        timeout=SEED_TIMEOUT_S,
        preexec_fn=die_with_parent,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"seeding failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-3000:]}")
    sessions = [Seeded(**item) for item in json.loads(done.stdout)["sessions"]]
    parts = ", ".join(f"{s.messages:,} in {s.seconds:.1f} s" for s in sessions)
    notes.append(
        f"seeding: {sum(s.messages for s in sessions):,} messages through Runtime.history.append_message "
        f"in {elapsed:.1f} s, process start and migrations included ({parts}); "
        f"database {db.stat().st_size / 2**20:.0f} MB"
    )
    return {s.messages: s for s in sessions}


def check_legacy_page(response: httpx.Response, session: Seeded) -> None:
    """Oldest first: the newest ``PAGE`` messages end with the session's newest, and say there is more."""
    page = response.json()
    if len(page) != PAGE or page[-1]["info"]["id"] != session.newest or "x-next-cursor" not in response.headers:
        raise RuntimeError(f"legacy page of {session.id}: {len(page)} messages, not the newest {PAGE}")


def check_v2_page(response: httpx.Response, session: Seeded) -> None:
    """Newest first: the page starts with the session's newest message and has a next cursor."""
    body = response.json()
    if len(body["data"]) != PAGE or body["data"][0]["id"] != session.newest or "next" not in body["cursor"]:
        raise RuntimeError(f"V2 page of {session.id}: {len(body['data'])} messages, not the newest {PAGE}")


@dataclass
class PageRead:
    """One timed endpoint on one session, with the check that it returns the newest page."""

    metric: Metric
    path: str
    check: Callable[[httpx.Response, Seeded], None]
    session: Seeded


def bench_pages(client: httpx.Client, reads: list[PageRead], warmup: int, iterations: int) -> None:
    """Each read is checked once, then all are timed in turns (one call of each per round), so a
    passing disturbance on the machine spreads over every session length instead of one."""
    params = {"limit": PAGE}
    for read in reads:
        response = client.get(read.path, params=params)
        response.raise_for_status()
        read.check(response, read.session)
    for index in range(warmup + iterations):
        for read in reads:
            elapsed = timed(lambda read=read: client.get(read.path, params=params), 200)
            if index >= warmup:
                read.metric.samples.append(elapsed)


def ratio(large: Metric, small: Metric, name: str) -> Metric:
    """The "flat" criterion: the largest session's median over the smallest's."""
    return Metric(name, "x", FLAT_RATIO, value=large.median / small.median)


def bench_fork(client: httpx.Client, metric: Metric, session: Seeded, runs: int) -> None:
    """``runs`` forks of the whole session (body ``{}``); each copy is checked to hold every message."""
    path = f"/session/{session.id}/fork"
    for _ in range(runs):
        started = time.perf_counter()
        response = client.post(path, json={}, timeout=FORK_TIMEOUT_S)
        metric.samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"fork of {session.id} -> {response.status_code}: {response.text[:300]}")
        copy = response.json()["id"]
        count = len(client.get(f"/session/{copy}/message", timeout=FORK_TIMEOUT_S).json())
        if count != session.messages:
            raise RuntimeError(f"fork {copy} holds {count} of {session.messages} messages")


def run(quick: bool, notes: list[str]) -> list[Metric]:
    warmup, iterations = (10, 50) if quick else (20, 300)
    fork_runs = 3
    legacy = {n: Metric(f"GET /session/:id/message?limit={PAGE} ({n:,} msgs)", "ms", PAGE_TARGET_MS) for n in SIZES}
    v2 = {n: Metric(f"GET /api/session/:id/message?limit={PAGE} ({n:,} msgs)", "ms", PAGE_TARGET_MS) for n in SIZES}
    fork = Metric(f"POST /session/:id/fork ({FORK_SIZE:,} msgs)", "s", FORK_TARGET_S)

    with workspace("opensession-history-") as (base, project, config):
        db = base / "history.db"
        progress(f"seeding sessions of {', '.join(f'{n:,}' for n in SIZES)} messages")
        sessions = seed(db, project, config, sorted({*SIZES, FORK_SIZE}), notes)
        with (
            running(Server(db, project, config, base / "server.log")) as srv,
            httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as client,
        ):
            progress(f"server at {srv.url}: newest {PAGE} messages, legacy and V2, {iterations} rounds")
            reads = [
                PageRead(metrics[n], f"{prefix}/session/{sessions[n].id}/message", check, sessions[n])
                for prefix, metrics, check in (("", legacy, check_legacy_page), ("/api", v2, check_v2_page))
                for n in SIZES
            ]
            bench_pages(client, reads, warmup, iterations)
            paged_rss = srv.peak_rss_mb()
            progress(f"fork of the {FORK_SIZE:,}-message session, {fork_runs} times")
            bench_fork(client, fork, sessions[FORK_SIZE], fork_runs)
            notes.append(
                f"server peak RSS (VmHWM): {paged_rss:.1f} MB after the pages, {srv.peak_rss_mb():.1f} MB after forks"
            )

    small, large = min(SIZES), max(SIZES)
    label = f"{large // 1000}k / {small // 1000}k median"
    return [
        *legacy.values(),
        ratio(legacy[large], legacy[small], f"legacy page flatness ({label})"),
        *v2.values(),
        ratio(v2[large], v2[small], f"V2 page flatness ({label})"),
        fork,
    ]


def main(argv: list[str] | None = None) -> int:
    return cli(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
