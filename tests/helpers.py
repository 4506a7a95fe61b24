"""Small request helpers shared by the tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.events.log import EventLog
from app.wire import Session


def create_session(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/session", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def session_info(directory: str, session_id: str = "ses_test", project_id: str = "global") -> Session:
    """A session info as the server stores one, for calling a tool or a domain directly."""
    return {
        "id": session_id,
        "slug": "test-session",
        "projectID": project_id,
        "directory": directory,
        "title": "Test session",
        "version": "test",
        "time": {"created": 0, "updated": 0},
    }


def text_prompt(text: str, **extra: Any) -> dict[str, Any]:
    return {"parts": [{"type": "text", "text": text}], **extra}


def assistant_text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def running(pid: int) -> bool:
    """Whether a process is alive (a zombie waiting to be reaped by init counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def git_repository(path: Path) -> Path:
    """Make ``path`` a git repository with one commit of what it holds (snapshots need git)."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "start")
    return path


def many_files(path: Path, folders: int, per_folder: int) -> int:
    """Write ``folders`` x ``per_folder`` small files ``d<i>/f<j>.txt`` under ``path`` (a tree
    that takes git a second or more to check out); their count."""
    for folder in range(folders):
        (path / f"d{folder}").mkdir()
        for index in range(per_folder):
            (path / f"d{folder}" / f"f{index}.txt").write_text(f"file {index}\n")
    return folders * per_folder


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``check`` until it holds; fail if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def marking_mcp_project(tmp_path: Path) -> tuple[Path, Path]:
    """A directory whose opencode.json names an MCP server that only leaves a mark when started
    (as a downloaded repository could), and the path of that mark."""
    directory = tmp_path / "downloaded-repo"
    directory.mkdir()
    marker = tmp_path / "mcp-started"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    (directory / "opencode.json").write_text(json.dumps({"mcp": {"x": {"type": "local", "command": command}}}))
    return directory, marker


def count_commits(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The durable event types of each transaction the log commits from now on."""
    committed: list[list[str]] = []
    committing = log.topology.committing

    def counted(scope: Any, events: list[Any], next_seq: dict[str, int]) -> None:
        committed.append([e.type for e in events if e.durable])
        committing(scope, events, next_seq)

    monkeypatch.setattr(log.topology, "committing", counted)
    return committed
