"""Worktree creates and removals under fast kills: a probe for the adds and removals a death
cuts short.

Server processes on one throw-away PostgreSQL database share a data directory and a git project;
``--clients`` clients make worktrees back to back, each with an Idempotency-Key, sending a
request again (to a process at random) until it is answered, and now and then once more after,
and remove some of them (sent again until answered); meanwhile a random process gets ``kill -9``
every 0.05-1 s and is started again. It lands inside ``git worktree add`` and ``remove`` far more
often than ``bench/chaos.py`` does (every 2-5 s).

Then, once the processes have swept what was cut short, it checks: each key was answered with one
worktree; git's worktrees, the project's listing and the answered worktrees not removed are the
same; each is filled; no branch is left without its worktree, and no journal (of an add or a
removal) is left. The exit status is 1 when something broke. Everything runs on 127.0.0.1 and is
removed on exit::

    python bench/worktree_kills.py [--seconds 60] [--processes 2] [--clients 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # ``tests`` starts the cluster and the processes

from tests.helpers import git_repository, many_files  # noqa: E402
from tests.postgres import start_cluster  # noqa: E402
from tests.servers import ProcessServer, process_server, start_together  # noqa: E402

FILES = (20, 100)  # folders x files of the project: a fill takes a moment
SWEEP_WAIT_S = 12.0  # two sweeps of every process (app/runtime/worktrees/_fills.py)
RETRIES = 20
REMOVED = 0.4  # the share of the worktrees made that are removed


@dataclass
class Seen:
    answers: dict[str, set[str]] = field(default_factory=dict)  # key -> worktrees answered
    removed: set[str] = field(default_factory=set)  # worktrees whose removal was answered
    problems: list[str] = field(default_factory=list)
    kills: int = 0


def _client(servers: list[ProcessServer], name: str, seen: Seen, rng: random.Random, until: float) -> None:
    made = 0
    while time.monotonic() < until:
        made += 1
        key, body = f"{name}-{made}", {"name": f"{name}x{made}"}
        sends = 2 if rng.random() < 0.3 else 1
        for _ in range(RETRIES):
            try:
                answer = httpx.post(
                    f"{rng.choice(servers).url}/experimental/worktree",
                    json=body,
                    headers={"Idempotency-Key": key},
                    timeout=30,
                )
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if answer.status_code == 200:
                seen.answers.setdefault(key, set()).add(answer.json()["directory"])
                sends -= 1
                if not sends:
                    if rng.random() < REMOVED:
                        _remove(servers, answer.json()["directory"], seen, rng)
                    break
            elif answer.status_code != 503:  # 503: the database was away; anything else is a bug
                seen.problems.append(f"{key}: {answer.status_code} {answer.text[:200]}")
                break
            else:
                time.sleep(0.2)


def _remove(servers: list[ProcessServer], tree: str, seen: Seen, rng: random.Random) -> None:
    """Remove ``tree``, sending the request again until it is answered."""
    for _ in range(RETRIES):
        try:
            answer = httpx.request(
                "DELETE", f"{rng.choice(servers).url}/experimental/worktree", json={"directory": tree}, timeout=30
            )
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        if answer.status_code == 200:
            seen.removed.add(tree)
            return
        if answer.status_code != 503:
            seen.problems.append(f"removing {tree}: {answer.status_code} {answer.text[:200]}")
            return
        time.sleep(0.2)


def _killer(servers: list[ProcessServer], seen: Seen, rng: random.Random, until: float) -> None:
    while time.monotonic() < until:
        time.sleep(rng.uniform(0.05, 1.0))
        victim = rng.choice(servers)
        victim.kill9()
        seen.kills += 1
        time.sleep(rng.uniform(0, 0.5))
        victim.start()


def _git(cwd: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def _filled(tree: str) -> bool:
    """Whether the worktree holds its branch's files: git sees no change (an unfilled one,
    added without a checkout, has every file deleted)."""
    status = _git(tree, "status", "--porcelain")
    return status.returncode == 0 and not status.stdout.strip()


def worktree_problems(url: str, project: Path, answers: dict[str, set[str]], removed: set[str]) -> list[str]:
    """What broke, once the processes have swept what deaths cut short: a key answered with more
    than one worktree (``answers``: key -> worktrees); an answered worktree not ``removed`` that
    git, the project's listing or its fill lacks; a worktree, branch or journal (of an add or a
    removal) that no answer accounts for. Also used by ``bench/chaos.py``."""
    problems = [f"{key} was answered with {sorted(dirs)}" for key, dirs in answers.items() if len(dirs) > 1]
    answered = {directory for dirs in answers.values() for directory in dirs}
    kept = answered - removed
    listed = set(httpx.get(f"{url}/experimental/worktree", timeout=30).json())
    porcelain = _git(project, "worktree", "list", "--porcelain")
    if porcelain.returncode != 0:
        problems.append(f"git worktree list fails: {porcelain.stderr.strip()}")
    trees = {line.split(" ", 1)[1] for line in porcelain.stdout.splitlines() if line.startswith("worktree ")}
    trees.discard(str(project))
    problems += [f"worktree {tree} is not listed" for tree in sorted(kept - listed)]
    problems += [f"worktree {tree} is listed, removed or never answered" for tree in sorted(listed - kept)]
    problems += [f"git has worktree {tree}, removed or never answered" for tree in sorted(trees - kept)]
    problems += [f"worktree {tree} is not git's" for tree in sorted(kept - trees)]
    problems += [f"worktree {tree} is not filled" for tree in sorted(kept & trees) if not _filled(tree)]
    branches = set(_git(project, "branch", "--list", "opencode/*", "--format=%(refname:short)").stdout.split())
    names = {f"opencode/{Path(tree).name}" for tree in kept}
    problems += [f"branch {branch} is left with no worktree" for branch in sorted(branches - names)]
    homes = {Path(tree).parent for tree in answered}
    problems += [f"journal {journal} is left" for home in homes for journal in sorted(home.glob(".*.*ing"))]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60, help="how long the kills last (default 60)")
    parser.add_argument("--processes", type=int, default=2, help="server processes (default 2)")
    parser.add_argument("--clients", type=int, default=3, help="clients making worktrees (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="the random choices' seed (default 1)")
    options = parser.parse_args(argv)
    cluster = start_cluster()
    if cluster is None:
        raise SystemExit("needs PostgreSQL (apt-get install postgresql)")
    rng, seen = random.Random(options.seed), Seen()
    with tempfile.TemporaryDirectory(prefix="opensession-worktree-kills-") as tmp:
        base = Path(tmp)
        project, config, data = base / "project", base / "config", base / "data"
        project.mkdir()
        config.mkdir()
        many_files(project, *FILES)
        git_repository(project)
        database = cluster.create_database()
        servers = [process_server(database, project, config, data) for _ in range(options.processes)]
        try:
            start_together(*servers)
            until = time.monotonic() + options.seconds
            threads = [
                threading.Thread(target=_client, args=(servers, f"c{n}", seen, random.Random(rng.random()), until))
                for n in range(options.clients)
            ]
            threads.append(threading.Thread(target=_killer, args=(servers, seen, random.Random(rng.random()), until)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(SWEEP_WAIT_S)
            seen.problems += worktree_problems(servers[0].url, project, seen.answers, seen.removed)
        finally:
            for server in servers:
                server.stop()
            cluster.stop()
    print(f"keys {len(seen.answers)}, removed {len(seen.removed)}, kills {seen.kills}, problems: {len(seen.problems)}")
    for problem in seen.problems[:30]:
        print(f"  {problem}")
    return 1 if seen.problems else 0


if __name__ == "__main__":
    sys.exit(main())
