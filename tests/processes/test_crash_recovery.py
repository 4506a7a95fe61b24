"""A stop in the middle of a turn loses nothing that was admitted: after a restart every reply the
stop left open is closed with an error (keeping its checkpointed text), tool calls that were
pending, running or waiting for a permission are marked failed and never re-run, and every
admitted prompt gets an answer. Kills land in each phase of a turn, the later steps included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers import assistant_text, git_repository, many_files, running, text_prompt, wait_until
from tests.servers import ROOT, ProcessServer, process_server
from tests.sse import EventCollector, Frame

SLOW_PROMPT = "SLOW:0.3 a long answer"


def _settled(url: str, sid: str, timeout: float = 30) -> list[dict]:
    """The history once the session is idle and its newest reply completed without error."""
    deadline = time.monotonic() + timeout
    history: list[dict] = []
    while time.monotonic() < deadline:
        history = httpx.get(f"{url}/session/{sid}/message").json()
        last = history[-1]["info"] if history else {}
        idle = httpx.get(f"{url}/session/status").json() == {}
        if idle and last.get("role") == "assistant" and "completed" in last["time"] and "error" not in last:
            return history
        time.sleep(0.1)
    raise TimeoutError(f"{sid} never settled: {[m['info'] for m in history]}")


def _assert_nothing_open(url: str, history: list[dict]) -> None:
    for message in history:
        if message["info"]["role"] != "assistant":
            continue
        assert "completed" in message["info"]["time"], message["info"]
        for part in message["parts"]:
            if part["type"] in ("text", "reasoning"):
                assert "end" in part["time"], part
            if part["type"] == "tool":
                assert part["state"]["status"] in ("completed", "error"), part
    assert httpx.get(f"{url}/permission").json() == []


def _restart(database_url: str, project_dir: Path, config_dir: Path) -> ProcessServer:
    restarted = process_server(database_url, project_dir, config_dir)
    restarted.start()
    return restarted


def _recovered(database_url: str, project_dir: Path, config_dir: Path, sid: str, replies: int) -> list[dict]:
    """The session's history once a restarted server has settled ``replies`` replies in it,
    with nothing left open."""
    restarted = _restart(database_url, project_dir, config_dir)
    try:
        history = _settled(restarted.url, sid)
        while len([m for m in history if m["info"]["role"] == "assistant"]) < replies:
            time.sleep(0.1)
            history = _settled(restarted.url, sid)
        _assert_nothing_open(restarted.url, history)
        return history
    finally:
        restarted.stop()


@pytest.mark.slow
def test_kill_9_during_a_turn_then_restart(database_url: str, project_dir: Path, config_dir: Path) -> None:
    server = process_server(database_url, project_dir, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        with EventCollector(f"{server.url}/event") as events:
            assert (
                httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt(SLOW_PROMPT)).status_code == 204
            )
            assert (
                httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt("queued behind")).status_code
                == 204
            )
            deltas = 0

            def two_deltas(frame: Frame) -> bool:
                nonlocal deltas
                deltas += frame.type == "message.part.delta"
                return deltas >= 2

            events.wait_for(two_deltas, timeout=15)
            time.sleep(0.05)
            server.kill9()
    finally:
        server.stop()

    history = _recovered(database_url, project_dir, config_dir, sid, replies=3)
    users = [m for m in history if m["info"]["role"] == "user"]
    replies = [m for m in history if m["info"]["role"] == "assistant"]
    assert [assistant_text(u) for u in users] == [SLOW_PROMPT, "queued behind"]
    interrupted, *answers = replies
    assert interrupted["info"]["parentID"] == users[0]["info"]["id"]
    assert interrupted["info"]["error"]["name"] == "MessageAbortedError"
    assert "completed" in interrupted["info"]["time"]
    partial = assistant_text(interrupted)
    assert partial and ("Echo: " + SLOW_PROMPT).startswith(partial)  # checkpointed text survived
    assert all("end" in p["time"] for p in interrupted["parts"] if p["type"] == "text")
    assert [a["info"]["parentID"] for a in answers] == [u["info"]["id"] for u in users]
    assert [assistant_text(a) for a in answers] == ["Echo: " + SLOW_PROMPT, "Echo: queued behind"]


def _tool_status(frame: Frame, tool: str, status: str) -> bool:
    part = frame.properties.get("part") or {}
    return (
        frame.type == "message.part.updated"
        and part.get("tool") == tool
        and (part.get("state") or {}).get("status") == status
    )


@dataclass
class Phase:
    prompt: str
    permission: dict[str, str]
    reached: Callable[[EventCollector], object]  # blocks until the turn is in the phase


def _step_two_streaming(events: EventCollector) -> None:
    events.wait_for(lambda f: _tool_status(f, "read", "completed"), timeout=15)
    events.wait_for(lambda f: f.type == "message.part.delta", timeout=15)


PHASES = {
    "tool running in step 1": Phase(
        "TOOL:bash sleep 5", {}, lambda ev: ev.wait_for(lambda f: _tool_status(f, "bash", "running"), 15)
    ),
    "step 2 streaming": Phase("SLOW:0.3\nTOOL:read hello.txt", {}, _step_two_streaming),
    "permission wait in step 2": Phase(
        "TOOL:read hello.txt\nTHEN:bash echo later",
        {"bash": "ask"},
        lambda ev: ev.wait_for(lambda f: f.type == "permission.asked", 15),
    ),
    "tool running in step 2": Phase(
        "TOOL:read hello.txt\nTHEN:bash sleep 5",
        {},
        lambda ev: ev.wait_for(lambda f: _tool_status(f, "bash", "running"), 15),
    ),
}


@pytest.mark.slow
def test_kill_9_before_a_step_is_begun_answers_its_prompt_once(
    database_url: str, project_dir: Path, config_dir: Path
) -> None:
    """Killed while the step's opening waits for the model's first token (nothing of the step is
    stored yet): after a restart the prompt is answered as if never begun, by one reply."""
    server = process_server(database_url, project_dir, config_dir)
    server.env["OPENSESSION_STEP_OPENING_GRACE_SECONDS"] = "60"  # longer than the test
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        with EventCollector(f"{server.url}/event") as events:
            prompt = text_prompt("SLOW:1 answered once")
            assert httpx.post(f"{server.url}/session/{sid}/prompt_async", json=prompt).status_code == 204
            events.wait_for(lambda f: f.type == "session.status", timeout=15)
            time.sleep(0.2)
            assert [m["info"]["role"] for m in httpx.get(f"{server.url}/session/{sid}/message").json()] == ["user"]
            server.kill9()
    finally:
        server.stop()
    history = _recovered(database_url, project_dir, config_dir, sid, replies=1)
    assert [m["info"]["role"] for m in history] == ["user", "assistant"]
    assert history[1]["info"]["parentID"] == history[0]["info"]["id"]
    assert assistant_text(history[1]) == "Echo: SLOW:1 answered once"


def test_kill_9_during_a_shell_command_ends_the_command(database_url: str, project_dir: Path, config_dir: Path) -> None:
    """A server killed while its tool runs a command: the command, and what it put in the
    background, die with it rather than go on changing the project (where another process may
    have taken the session over)."""
    server = process_server(database_url, project_dir, config_dir)
    server.start()
    started, late, late_background = project_dir / "started.txt", project_dir / "late.txt", project_dir / "bg.txt"
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        command = "(sleep 2; echo late > bg.txt) & touch started.txt; sleep 2; echo late > late.txt"
        httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt(f"TOOL:bash {command}"))
        deadline = time.monotonic() + 15
        while not started.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        server.kill9()
        time.sleep(3)
    finally:
        server.stop()
    assert not late.exists(), "the command went on after its server was killed"
    assert not late_background.exists(), "what the command put in the background went on after its server was killed"


def _descendants(server: ProcessServer) -> str:
    """What the server started, and what each is doing (state, kernel wait), for a failure's
    message: the MCP server's start once hung in a full run of the suite, and never alone."""
    assert server.proc is not None
    table = subprocess.run(
        ["ps", "-ww", "-e", "-o", "pid=,ppid=,pgid=,stat=,wchan:24=,etime=,args="], capture_output=True, text=True
    ).stdout.splitlines()
    parents = {int(line.split()[0]): int(line.split()[1]) for line in table}
    ours = {server.proc.pid}
    for pid in sorted(parents):  # a child's pid may be lower than its parent's (pids wrap)
        ancestor = pid
        while ancestor in parents and ancestor not in ours and ancestor > 1:
            ancestor = parents[ancestor]
        if ancestor in ours:
            ours.add(pid)
    described = []
    for line in table:
        pid = int(line.split()[0])
        if pid in ours:
            status = Path(f"/proc/{pid}/status")
            try:
                masks = [m for m in status.read_text().splitlines() if m.startswith("Sig")]
                path = [v for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if v.startswith(b"PATH=")]
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                masks, path, cwd = [], [], "?"
            described.append(f"{line}\n    {' '.join(masks)}\n    cwd={cwd} {path}")
    return "\n".join(described)


def test_kill_9_ends_what_a_local_mcp_server_started(database_url: str, project_dir: Path, config_dir: Path) -> None:
    """A stdio MCP server ends on its own when its stdin closes, but what it started does not
    (``npx`` and the server it runs, here a ``sleep``): the whole group dies with the server."""
    server_script = ROOT / "tests" / "mcp_server.py"
    command = f"sleep 300 & echo $! > mcp-child.pid; exec {sys.executable} {server_script} stdio"
    config = {"mcp": {"local": {"type": "local", "command": ["bash", "-c", command]}}}
    (project_dir / "opencode.json").write_text(json.dumps(config))
    server = process_server(database_url, project_dir, config_dir)
    server.start()
    child = 0
    try:
        with ThreadPoolExecutor(1) as pool:
            # Longer than the server's own wait for the MCP server (30 s): its answer says why.
            asked = pool.submit(lambda: httpx.get(f"{server.url}/mcp", timeout=45))
            try:
                status = asked.result(timeout=15).json()["local"]
                seen = ""
            except TimeoutError:  # what the server started, while it hangs
                seen = _descendants(server)
                status = asked.result().json()["local"]
            except httpx.HTTPError as exc:
                pytest.fail(f"GET /mcp: {exc!r}; the server's log ends:\n{server.log_tail()}")
        assert status == {"status": "connected"}, f"{server.log_tail()}\n{seen}"
        child = int((project_dir / "mcp-child.pid").read_text())
        assert running(child)
        server.kill9()
        wait_until(lambda: not running(child), timeout=10)
    finally:
        server.stop()
        if child and running(child):
            os.kill(child, 9)


@pytest.mark.slow
def test_kill_9_while_a_new_worktree_fills_fills_it_at_the_next_start(
    tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    """A worktree is answered at once and filled in the background; a server killed during the
    fill (20,000 files take a second or more here) left it listed and empty for good. The next
    start fills it."""
    files = many_files(project_dir, 100, 200)
    git_repository(project_dir)
    server = process_server(f"sqlite+aiosqlite:///{tmp_path / 'opensession.db'}", project_dir, config_dir)
    server.start()
    try:
        made = httpx.post(f"{server.url}/experimental/worktree", json={"name": "big"})
        assert made.status_code == 200, made.text
        server.kill9()
        tree = Path(made.json()["directory"])
        assert sum(1 for _ in tree.rglob("f*.txt")) < files, "filled before the kill: nothing to test"
        server.start()
        wait_until(lambda: sum(1 for _ in tree.rglob("f*.txt")) == files, timeout=60)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True, check=True)
        assert status.stdout == ""
        assert httpx.get(f"{server.url}/experimental/worktree").json() == [str(tree)]
    finally:
        server.stop()


def _server_whose_git_holds(
    command: str, tmp_path: Path, project_dir: Path, config_dir: Path
) -> tuple[ProcessServer, Path]:
    """A server started on a new git project, with a ``git`` in front of the real one that holds
    its process after the first ``git <command>`` is done (60 s), and the file that says so."""
    (project_dir / "committed.txt").write_text("from the main tree\n")
    git_repository(project_dir)
    wrapper, held = tmp_path / "bin", tmp_path / "held"
    wrapper.mkdir()
    (wrapper / "git").write_text(
        f"""#!/bin/sh
{shutil.which("git")} "$@"; code=$?
case " $* " in *" {command} "*) [ -e {held} ] || {{ touch {held}; sleep 60; }};; esac
exit $code
"""
    )
    (wrapper / "git").chmod(0o755)
    server = process_server(f"sqlite+aiosqlite:///{tmp_path / 'opensession.db'}", project_dir, config_dir)
    server.env["PATH"] = f"{wrapper}:{os.environ['PATH']}"
    server.start()
    return server, held


def test_kill_9_right_after_git_added_a_worktree_is_finished_and_its_retry_answers_it(
    tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    """A server killed after ``git worktree add`` and before it recorded the fill left a worktree
    that nothing filled or listed, and the request's retry (nginx passes it on with its
    Idempotency-Key) added a second one. A ``git`` in front of the real one holds the first add's
    process there; the next start finishes that worktree, and the retry answers it."""
    server, added = _server_whose_git_holds("worktree add", tmp_path, project_dir, config_dir)
    body, keyed = {"name": "held"}, {"Idempotency-Key": "add-once"}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(client.post, "/experimental/worktree", json=body, headers=keyed)
                wait_until(added.exists, timeout=30)
                server.kill9()
                with pytest.raises(httpx.TransportError):
                    first.result()
            server.start()
            again = client.post("/experimental/worktree", json=body, headers=keyed)
            assert again.status_code == 200, again.text
            tree = Path(again.json()["directory"])
            assert again.json() == {"name": "held", "branch": "opencode/held", "directory": str(tree)}
            wait_until(lambda: (tree / "committed.txt").exists(), timeout=30)
            assert client.get("/experimental/worktree").json() == [str(tree)]
            branches = subprocess.run(
                ["git", "branch", "--list", "opencode/*", "--format=%(refname:short)"],
                cwd=project_dir,
                capture_output=True,
                text=True,
                check=True,
            )
            assert branches.stdout.split() == ["opencode/held"]
            removed = client.request("DELETE", "/experimental/worktree", json={"directory": str(tree)})
            assert removed.status_code == 200 and not tree.exists(), removed.text
    finally:
        server.stop()


@pytest.mark.parametrize("retried", [True, False])
@pytest.mark.parametrize("step", ["worktree remove", "branch -D"])
def test_kill_9_mid_removal_of_a_worktree_is_finished(
    step: str, retried: bool, tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    """A server killed between the steps of a worktree's removal (git removed the tree, or also
    the branch) left the branch or the project's entry behind, and the request's retry, finding
    no worktree, answered that it was removed. A ``git`` in front of the real one holds the
    removal's process after ``step``; after the restart, with or without the retry, the worktree,
    its branch and its entry are gone."""
    server, held = _server_whose_git_holds(step, tmp_path, project_dir, config_dir)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            made = client.post("/experimental/worktree", json={"name": "going"})
            assert made.status_code == 200, made.text
            tree = Path(made.json()["directory"])
            wait_until(lambda: (tree / "committed.txt").exists(), timeout=30)
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(client.request, "DELETE", "/experimental/worktree", json={"directory": str(tree)})
                wait_until(held.exists, timeout=30)
                server.kill9()
                with pytest.raises(httpx.TransportError):
                    first.result()
            server.start()
            if retried:
                again = client.request("DELETE", "/experimental/worktree", json={"directory": str(tree)})
                assert again.status_code == 200 and again.json() is True, again.text
            assert client.get("/experimental/worktree").json() == []
        branches = subprocess.run(
            ["git", "branch", "--list", "opencode/*"], cwd=project_dir, capture_output=True, text=True, check=True
        )
        assert branches.stdout == ""
        assert not tree.exists() and list(tree.parent.glob(".*")) == []
        listed = subprocess.run(["git", "worktree", "list"], cwd=project_dir, capture_output=True, text=True)
        assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 1, listed
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["kill -9", "terminate"])
@pytest.mark.parametrize("phase", list(PHASES))
def test_stop_in_any_phase_of_a_tool_turn(
    database_url: str, project_dir: Path, config_dir: Path, phase: str, stop: str
) -> None:
    spec = PHASES[phase]
    (project_dir / "hello.txt").write_text("hello from the project\n")
    if spec.permission:
        (project_dir / "opencode.json").write_text(json.dumps({"permission": spec.permission}))
    server = process_server(database_url, project_dir, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        with EventCollector(f"{server.url}/event") as events:
            response = httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt(spec.prompt))
            assert response.status_code == 204
            spec.reached(events)
            server.kill9() if stop == "kill -9" else server.stop()
    finally:
        server.stop()

    restarted = _restart(database_url, project_dir, config_dir)
    try:
        history = _settled(restarted.url, sid)
        _assert_nothing_open(restarted.url, history)
        # A later prompt is answered normally: the session is not left wedged.
        httpx.post(f"{restarted.url}/session/{sid}/prompt_async", json=text_prompt("after the restart"))
        later = _settled(restarted.url, sid)
        assert assistant_text(later[-1]) == "Echo: after the restart"
    finally:
        restarted.stop()

    user = history[0]
    replies = [m for m in history if m["info"]["role"] == "assistant"]
    assert all(r["info"]["parentID"] == user["info"]["id"] for r in replies)
    cut = [r for r in replies if "error" in r["info"]]
    assert cut and all(r["info"]["error"]["name"] == "MessageAbortedError" for r in cut)
    assert "error" not in replies[-1]["info"] and replies[-1]["info"]["finish"] == "stop"
    # What was cut short is never run again: each tool call happened in exactly one step.
    bash_calls = [p for r in replies for p in r["parts"] if p["type"] == "tool" and p["tool"] == "bash"]
    assert len(bash_calls) <= 1
    if bash_calls:
        assert bash_calls[0]["state"]["status"] == "error"
