"""A disk that fills up in the middle of a turn, for real: the SQLite database lives on a tmpfs of
a few megabytes, and a file written until the kernel says ENOSPC fills what is left while the
reply streams, so SQLite's next write fails with SQLITE_FULL ("database or disk is full").

What must hold: the turn reports the failure (the reply gets the error, ``session.error``, status
idle, the prompt settled); when even that cannot be written, the next drain closes the reply the
failed one left open, and no prompt is ever answered twice.

SQLite only: the failure is the filesystem's, under the embedded engine. Mounting needs root
(CI runs as root); elsewhere these are skipped."""

from __future__ import annotations

import errno
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.helpers import assistant_text, create_session, git_repository, text_prompt, wait_until
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


class Disk:
    """A small filesystem of its own; ``fill`` takes all the space left, ``free`` gives it back."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._filler = root / "filler"

    def fill(self) -> None:
        # Unbuffered: a buffered file keeps what a short write left over and fails again when it
        # is closed, depending on how the space left divides into blocks.
        with self._filler.open("ab", buffering=0) as filler:
            block = b"\0" * 65536
            try:
                while True:
                    filler.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(root)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield Disk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def full_server(settings: Settings, disk: Disk) -> Iterator[ThreadServer]:
    """A server whose database is on ``disk``, checkpointing streamed text often."""
    on_disk = settings.model_copy(update={"db": str(disk.root / "opensession.db"), "part_flush_seconds": 0.05})
    with thread_server(on_disk) as server:
        yield server


class _OnStepFailure(logging.Handler):
    """Runs ``action`` when the server logs a failed step (in the server's thread, before the
    turn writes its error)."""

    def __init__(self, action: object) -> None:
        super().__init__()
        self.action = action
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("a step of"):
            self.failures += 1
            if callable(self.action):
                self.action()


@pytest.fixture
def step_failures() -> Iterator[list[_OnStepFailure]]:
    handlers: list[_OnStepFailure] = []
    runner_log = logging.getLogger("opensession.runner")
    yield handlers
    for handler in handlers:
        runner_log.removeHandler(handler)


def _watch(handlers: list[_OnStepFailure], action: object) -> _OnStepFailure:
    handler = _OnStepFailure(action)
    logging.getLogger("opensession.runner").addHandler(handler)
    handlers.append(handler)
    return handler


def _fill_mid_reply(server: ThreadServer, client: httpx.Client, disk: Disk, sid: str) -> EventCollector:
    """Prompt, and fill the disk once the reply streams; returns the collector (idle seen)."""
    events = EventCollector(f"{server.url}/event")
    prompt = text_prompt("SLOW:0.15 the disk fills while this streams")
    assert client.post(f"/session/{sid}/prompt_async", json=prompt).status_code == 204
    events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid)
    disk.fill()
    events.wait_idle(sid, timeout=15)
    return events


def _replies(client: httpx.Client, sid: str) -> list[dict]:
    return [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "assistant"]


def test_a_full_disk_mid_turn_is_an_error_the_turn_reports(
    full_server: ThreadServer, disk: Disk, step_failures: list[_OnStepFailure]
) -> None:
    watch = _watch(step_failures, disk.free)  # space comes back before the error is written
    with httpx.Client(base_url=full_server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        events = _fill_mid_reply(full_server, client, disk, sid)
        assert watch.failures == 1
        errors = [f for f in events.snapshot() if f.type == "session.error"]
        assert [f.properties["error"]["data"]["message"] for f in errors] == ["database or disk is full"]
        (reply,) = _replies(client, sid)
        assert reply["info"]["error"]["data"]["message"] == "database or disk is full"
        assert "completed" in reply["info"]["time"]
        assert client.get("/session/status").json() == {}
        answer = client.post(f"/session/{sid}/message", json=text_prompt("and now"))
        assert answer.status_code == 200 and assistant_text(answer.json()) == "Echo: and now"
        assert [r["info"]["parentID"] for r in _replies(client, sid)] == [
            m["info"]["id"] for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"
        ]  # one reply per prompt: nothing answered twice


def test_when_not_even_the_error_can_be_written_the_next_drain_closes_the_reply(
    full_server: ThreadServer, disk: Disk, step_failures: list[_OnStepFailure]
) -> None:
    watch = _watch(step_failures, None)  # the disk stays full while the turn fails
    with httpx.Client(base_url=full_server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        _fill_mid_reply(full_server, client, disk, sid)
        assert watch.failures == 1
        wait_until(lambda: client.get("/session/status").json() == {})
        (left,) = _replies(client, sid)
        assert "completed" not in left["info"]["time"]  # nothing could be written: still open
        disk.free()
        answer = client.post(f"/session/{sid}/message", json=text_prompt("after the space came back"))
        assert answer.status_code == 200, answer.text
        assert assistant_text(answer.json()) == "Echo: after the space came back"
        first, second = _replies(client, sid)
        assert first["info"]["id"] == left["info"]["id"] and "completed" in first["info"]["time"]
        assert "could not be recorded" in first["info"]["error"]["data"]["message"]
        users = [m for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]
        assert [first["info"]["parentID"], second["info"]["parentID"]] == [u["info"]["id"] for u in users]


def test_projects_are_listed_on_a_full_disk(full_server: ThreadServer, disk: Disk, tmp_path: Path) -> None:
    """Listing projects records the places of directories seen here (for machines that lack
    them); on a full disk that record fails and the listing is answered all the same."""
    elsewhere = tmp_path / "not-seen-yet"
    elsewhere.mkdir()
    with httpx.Client(base_url=full_server.url) as client:
        disk.fill()
        listed = client.get("/project", params={"directory": str(elsewhere)})
        assert listed.status_code == 200, listed.text
        assert listed.json()[0]["worktree"] == str(elsewhere)
        disk.free()
        assert client.get("/project", params={"directory": str(elsewhere)}).status_code == 200


def test_a_worktree_create_on_a_full_disk_is_refused_and_leaves_nothing_behind(
    settings: Settings, disk: Disk, project_dir: Path
) -> None:
    """The data directory, where worktrees and their journals go, is on the full disk: the create
    is a 400 naming the disk, not a 500, and leaves no journal or branch; a removal, which frees
    room, goes on without its journal; once there is room the same name is free."""
    (project_dir / "committed.txt").write_text("from the main tree\n")
    git_repository(project_dir)
    on_disk = settings.model_copy(update={"data_dir": str(disk.root / "data")})
    with thread_server(on_disk) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/experimental/worktree", json={"name": "first"}).status_code == 200
        disk.fill()
        refused = client.post("/experimental/worktree", json={"name": "full"})
        assert refused.status_code == 400, refused.text
        assert refused.json()["name"] == "WorktreeCreateFailedError" and "No space left" in refused.text
        branches = subprocess.run(["git", "branch", "--list", "opencode/*"], cwd=project_dir, capture_output=True)
        assert b"opencode/full" not in branches.stdout
        assert not list((disk.root / "data" / "worktree").glob("*/.*.adding"))
        first = client.get("/experimental/worktree").json()[0]  # a removal frees room: it goes on
        removed = client.request("DELETE", "/experimental/worktree", json={"directory": first})
        assert removed.status_code == 200 and client.get("/experimental/worktree").json() == [], removed.text
        assert not Path(first).exists() and not list((disk.root / "data" / "worktree").glob("*/.*"))
        disk.free()
        made = client.post("/experimental/worktree", json={"name": "full"})
        assert made.status_code == 200 and made.json()["name"] == "full", made.text
