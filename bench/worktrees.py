"""Worktree benchmark of ``opensession serve``: creating, filling, resetting and removing git
worktrees (``/experimental/worktree``) of a generated repository of 10,000 files.

The repository (nested source-like files, one commit) is written under a temporary directory and
served as the project, as in ``bench/bench.py`` (subprocess, 127.0.0.1, free port, throw-away
database, config and data directory). Each round creates a worktree and times the answer and the
``worktree.ready`` frame on ``/global/event`` (the tree filled), changes a few files in it, resets
it and removes it. ``--url`` measures a server already running instead (OpenCode: ``opencode
serve``), with the generated repository as the request's directory. Everything is deleted on exit.

Run from the repository root::

    python bench/worktrees.py [--quick] [--url http://127.0.0.1:4096] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench import Metric, Server, cli, progress, running, timed, workspace

FILES = 10_000
ROUNDS = 10
CREATE_TARGET_MS = 100.0
READY_TARGET_MS = 3000.0  # git writing 10,000 files: most of it is the file system's time
RESET_TARGET_MS = 1000.0
REMOVE_TARGET_MS = 1000.0
# OpenCode 1.18.33 measured with --url on the same machine right after (bench/README.md).
OPENCODE_MS = {"create": 161.4, "ready": 20216.0, "reset": 1067.4, "remove": 1273.6}


def generate(root: Path, files: int) -> None:
    """``files`` small files over nested folders, committed once."""
    body = "def handler(value):\n    return value * 2  # the quick brown fox\n" * 12
    for index in range(files):
        path = root / "src" / f"pkg_{index % 50}" / f"mod_{index % 7}" / f"file_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# file {index}\n{body}")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@localhost", *args], cwd=root, check=True)


class GlobalEvents:
    """``/global/event`` on its own thread: when each ``worktree.ready``/``.failed`` arrived, by
    directory."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(5.0, read=None), trust_env=False)
        self.arrivals: queue.Queue[tuple[float, str, str]] = queue.Queue()
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        if not self._open.wait(10):
            raise TimeoutError("no /global/event stream")

    def _read(self) -> None:
        try:
            with self._client.stream("GET", "/global/event") as response:
                self._open.set()
                for line in response.iter_lines():
                    if line.startswith("data:") and "worktree." in line:
                        frame = json.loads(line[5:])
                        kind = frame["payload"]["type"]
                        self.arrivals.put((time.perf_counter(), kind, frame.get("directory", "")))
        except (httpx.HTTPError, RuntimeError):
            return

    def ready(self, directory: str) -> float:
        deadline = time.monotonic() + 60
        while True:
            arrived, kind, where = self.arrivals.get(timeout=max(0.1, deadline - time.monotonic()))
            if where == directory:
                if kind != "worktree.ready":
                    raise RuntimeError(f"{kind} for {directory}")
                return arrived

    def close(self) -> None:
        self._client.close()


def _rounds(client: httpx.Client, events: GlobalEvents, project: Path, rounds: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"create": [], "ready": [], "reset": [], "remove": []}
    scope = {"directory": str(project)}
    for index in range(rounds):
        started = time.perf_counter()
        response = client.post("/experimental/worktree", params=scope, json={"name": f"bench {index}"})
        found["create"].append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"create -> {response.status_code}: {response.text[:300]}")
        directory = response.json()["directory"]
        found["ready"].append((events.ready(directory) - started) * 1000)
        tree = Path(directory)
        for n in range(10):  # file n of ``generate``
            (tree / "src" / f"pkg_{n % 50}" / f"mod_{n % 7}" / f"file_{n}.py").write_text("changed\n")
        (tree / "untracked.txt").write_text("scratch\n")
        body = {"directory": directory}
        found["reset"].append(
            timed(lambda b=body: client.post("/experimental/worktree/reset", params=scope, json=b), 200)
        )
        found["remove"].append(
            timed(lambda b=body: client.request("DELETE", "/experimental/worktree", params=scope, json=b), 200)
        )
        if tree.exists():
            raise RuntimeError(f"{directory} is still there after its removal")
    return found


def _options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--url", help="measure this running server (e.g. OpenCode) instead of starting one")
    return parser


def run(quick: bool, notes: list[str]) -> list[Metric]:
    url = _options().parse_known_args(sys.argv[1:])[0].url
    files = 2_000 if quick else FILES
    rounds = 3 if quick else ROUNDS
    metrics = {
        "create": Metric("POST /experimental/worktree -> 200", "ms", CREATE_TARGET_MS, OPENCODE_MS["create"]),
        "ready": Metric("create -> worktree.ready (filled)", "ms", READY_TARGET_MS, OPENCODE_MS["ready"]),
        "reset": Metric("POST /experimental/worktree/reset", "ms", RESET_TARGET_MS, OPENCODE_MS["reset"]),
        "remove": Metric("DELETE /experimental/worktree", "ms", REMOVE_TARGET_MS, OPENCODE_MS["remove"]),
    }
    with workspace("opensession-bench-worktrees-") as (base, project, config), ExitStack() as stack:
        progress(f"writing and committing {files:,} files")
        started = time.perf_counter()
        generate(project, files)
        notes.append(f"repository: {files:,} files in one commit, made in {time.perf_counter() - started:.1f} s")
        if url is None:
            server = Server(base / "db.sqlite", project, config, base / "server.log")
            server.env["OPENSESSION_DATA_DIR"] = str(base / "data")
            stack.enter_context(running(server))
            url = server.url
        else:
            notes.append(f"measured the server at {url}")
        client = stack.enter_context(httpx.Client(base_url=url, timeout=120.0, trust_env=False))
        events = GlobalEvents(url)
        stack.callback(events.close)
        progress(f"{rounds} rounds of create, reset, remove")
        _rounds(client, events, project, 1)  # warm-up: the project's first worktree
        for name, samples in _rounds(client, events, project, rounds).items():
            metrics[name].samples = samples
    return list(metrics.values())


if __name__ == "__main__":
    raise SystemExit(cli(run, __doc__ or "", parents=[_options()]))
