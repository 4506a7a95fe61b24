"""What per-step snapshots cost: a step's snapshot on a big tree, the revert of a 100-file change,
and the overhead a turn pays for snapshots on a small project.

1. A generated git work tree of ``--files`` files (default 50,000, 4 KiB each: 200 MB), untracked
   in the user's repository as a fresh checkout's edits would be. The first snapshot stores
   everything; then, ``--runs`` times, three files change and a snapshot is taken again (what a
   step costs when few files changed): p50 and max. Then 100 files change and are reverted.
2. ``opensession serve`` on a small git project (20 files), twice: snapshots on, and off
   (``"snapshot": false``). For each, ``--prompts`` synchronous prompts with no tool (one
   snapshot per turn) and ``--prompts`` that write a file (snapshots around the tool step, the
   diff of the turn): the median per-turn time, and the difference on minus off.

Loopback only; everything lives in a temporary directory removed at the end.

    python bench/snapshots.py [--files 50000] [--runs 10] [--prompts 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import ConfigLoader  # noqa: E402
from app.runtime.snapshots import FileSnapshots  # noqa: E402


def _generate(root: Path, count: int) -> None:
    block = os.urandom(3072).hex()[:4096]
    per_dir = 100
    for index in range(count):
        folder = root / f"d{index // per_dir // 50:03d}" / f"s{index // per_dir:04d}"
        if index % per_dir == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index:06d}.txt").write_text(f"{index}\n{block}")


def _files(root: Path, count: int) -> list[Path]:
    return sorted(root.glob("d*/s*/f*.txt"))[:count]


async def big_tree(base: Path, count: int, runs: int) -> None:
    tree = base / "big"
    tree.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    started = time.perf_counter()
    _generate(tree, count)
    print(f"generated {count} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    snapshots = FileSnapshots(base / "data", ConfigLoader(str(base / "config")))
    directory = str(tree)

    started = time.perf_counter()
    first = await snapshots.track(directory)
    print(f"first snapshot (stores the whole tree): {time.perf_counter() - started:.2f} s")
    assert first is not None
    await snapshots.track(directory)  # warm

    some = _files(tree, runs * 3)
    times = []
    for run in range(runs):
        for path in some[run * 3 : run * 3 + 3]:
            path.write_text(f"changed {run}\n")
        started = time.perf_counter()
        await snapshots.track(directory)
        times.append((time.perf_counter() - started) * 1000)
    p50, worst = statistics.median(times), max(times)
    print(f"step snapshot, 3 files changed: p50 {p50:.0f} ms, max {worst:.0f} ms (target <= 200)")

    before = await snapshots.track(directory)
    assert before is not None
    hundred = _files(tree, 100)
    for path in hundred:
        path.write_text("rewritten\n")
    after = await snapshots.track(directory)
    assert after is not None
    started = time.perf_counter()
    changed = await snapshots.changed(directory, before, after)
    await snapshots.restore(directory, before, changed)
    elapsed = time.perf_counter() - started
    assert len(changed) == 100 and all(p.read_text() != "rewritten\n" for p in hundred)
    print(f"revert of a 100-file change: {elapsed * 1000:.0f} ms (target <= 1000)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(base: Path, mode: str) -> tuple[subprocess.Popen[bytes], httpx.Client, str]:
    """A server on a small git project (20 files) with snapshots ``on`` or ``off``, and a session."""
    project = base / f"small-{mode}"
    project.mkdir()
    for index in range(20):
        (project / f"file{index}.py").write_text(f"x = {index}\n" * 50)
    if mode == "off":
        (project / "opencode.json").write_text(json.dumps({"snapshot": False}))
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENSESSION_DATA_DIR": str(base / f"data-{mode}")}
    env["OPENSESSION_CONFIG_DIR"] = str(base / "config")
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--directory", str(project)]
    server = subprocess.Popen([*command, "--db", str(base / f"{mode}.db")], env=env, stderr=subprocess.DEVNULL)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    for _ in range(200):
        try:
            client.get("/global/health")
            break
        except httpx.TransportError:
            time.sleep(0.05)
    return server, client, client.post("/session", json={}).json()["id"]


def turn_overhead(base: Path, prompts: int) -> None:
    """Both servers run at once and take turns, so drift on the machine hits both alike."""
    servers = {mode: _serve(base, mode) for mode in ("off", "on")}
    time.sleep(2.1)  # a project's files are older than the racy window; freshly written ones are not
    try:

        def timed(mode: str, text: str) -> float:
            _, client, sid = servers[mode]
            started = time.perf_counter()
            client.post(f"/session/{sid}/message", json={"parts": [{"type": "text", "text": text}]})
            return (time.perf_counter() - started) * 1000

        for mode in servers:
            for _ in range(5):
                timed(mode, "warm up")
        kinds = {"turn without tools": lambda i: "hello", "turn writing a file": _write_prompt}
        for label, prompt in kinds.items():
            samples: dict[str, list[float]] = {"off": [], "on": []}
            for index in range(prompts):
                for mode in ("off", "on") if index % 2 else ("on", "off"):
                    samples[mode].append(timed(mode, prompt(index)))
            off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
            print(f"{label}: snapshots off {off:.1f} ms, on {on:.1f} ms, overhead {on - off:+.1f} ms (median)")
    finally:
        for server, client, _ in servers.values():
            client.close()
            server.terminate()
            server.wait(10)


def _write_prompt(index: int) -> str:
    return f'TOOL:write {{"filePath": "out{index % 3}.txt", "content": "v{index}"}}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=40)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opensession-snapshots-") as base:
        turn_overhead(Path(base), options.prompts)
        asyncio.run(big_tree(Path(base), options.files, options.runs))


if __name__ == "__main__":
    main()
