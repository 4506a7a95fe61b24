"""Workspace benchmark of ``opensession serve``: ``/find/file`` (fuzzy names) and ``/find`` (text
search) on a generated tree of 50,000 files (about 200 MB).

The tree (a git repository's worth of nested source-like files, with a ``.gitignore``d folder the
searches must skip) is written under a temporary directory, the server runs as in
``bench/bench.py`` (subprocess, 127.0.0.1, free port, throw-away database and config) with that
tree as its project, and is measured as a client sees it. ``/find/file`` is timed after a warm-up
(the first call builds the file index); queries rotate over file names, path fragments and fuzzy
abbreviations. Everything is deleted on exit.

Run from the repository root::

    python bench/workspace.py [--quick] [--json results.json]
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx

from bench import Metric, Server, cli, progress, running, timed, workspace

FILES = 50_000
TOTAL_BYTES = 200 * 1024 * 1024
FIND_FILE_TARGET_MS = 30.0
FIND_TEXT_TARGET_MS = 500.0
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo")
QUERIES = ("handler", "delta_17.py", "src/golf", "mdl", "echo/kilo", "readme", "cfg_utils", "zzz_absent")


def generate(root: Path, files: int, total: int) -> int:
    """A deterministic tree: ``files`` files over nested folders, ``total`` bytes in all, plus an
    ignored ``build/`` folder. Returns the bytes written."""
    rng = random.Random(7)
    size = total // files
    line = "def handler(value):  # the quick brown fox jumps over the lazy dog\n"
    body = (line * (size // len(line) + 1))[:size]
    written = 0
    for index in range(files):
        depth = 1 + index % 4
        folder = "/".join(f"{rng.choice(WORDS)}_{index % 7}" for _ in range(depth))
        name = f"{rng.choice(WORDS)}_{index % 100}.{rng.choice(('py', 'ts', 'md', 'txt'))}"
        path = root / "src" / folder / f"{index}_{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = f"# unique needle {index}\n" if index % 5000 == 0 else ""
        path.write_text(marker + body)
        written += size
    (root / "build").mkdir()
    for index in range(500):
        (root / "build" / f"out_{index}.txt").write_text("handler generated\n")
    (root / ".gitignore").write_text("build/\n")
    return written


def run(quick: bool, notes: list[str]) -> list[Metric]:
    files = 5_000 if quick else FILES
    iterations, warmup = (40, 5) if quick else (200, 20)
    find_file = Metric("GET /find/file (50k files)", "ms", FIND_FILE_TARGET_MS)
    find_text = Metric("GET /find (text search)", "ms", FIND_TEXT_TARGET_MS)
    with workspace("opensession-bench-workspace-") as (base, project, config):
        progress(f"writing {files:,} files")
        started = time.perf_counter()
        written = generate(project, files, TOTAL_BYTES * files // FILES)
        notes.append(f"tree: {files:,} files, {written / 1e6:.0f} MB, written in {time.perf_counter() - started:.1f} s")
        server = Server(base / "db.sqlite", project, config, base / "server.log")
        with running(server), httpx.Client(base_url=server.url, timeout=120.0, trust_env=False) as client:
            first = timed(lambda: client.get("/find/file", params={"query": "handler"}), 200)
            notes.append(f"first /find/file (builds the index with rg --files): {first:.0f} ms")
            for i in range(warmup):
                timed(lambda i=i: client.get("/find/file", params={"query": QUERIES[i % len(QUERIES)]}), 200)
            progress(f"/find/file x {iterations}")
            find_file.samples = [
                timed(lambda i=i: client.get("/find/file", params={"query": QUERIES[i % len(QUERIES)]}), 200)
                for i in range(iterations)
            ]
            progress("/find x 10")
            timed(lambda: client.get("/find", params={"pattern": "unique needle"}), 200)
            find_text.samples = [
                timed(lambda n=n: client.get("/find", params={"pattern": f"unique needle {n * 5000}$"}), 200)
                for n in range(10)
            ]
            absent = timed(lambda: client.get("/find", params={"pattern": "no such text anywhere"}), 200)
            notes.append(f"/find for text found nowhere (reads every file): {absent:.0f} ms")
    return [find_file, find_text]


if __name__ == "__main__":
    raise SystemExit(cli(run, __doc__ or ""))
