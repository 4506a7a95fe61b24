"""The project watcher: changes to files that are not ignored become ``file.watcher.updated``,
a branch switch ``vcs.branch.updated``. Real server, real git, real inotify."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import create_session, git_repository, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_the_watcher_announces_changes_that_are_not_ignored_and_branch_switches(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / ".gitignore").write_text("build/\n")
    (project_dir / "build").mkdir()
    git_repository(project_dir)
    subprocess.run(["git", "branch", "-M", "main"], cwd=project_dir, check=True)
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/message", json=text_prompt("hello"))  # a first prompt starts the watcher
        time.sleep(0.3)
        (project_dir / "build" / "out.o").write_text("ignored")
        (project_dir / "notes.md").write_text("seen")
        added = events.wait_for(lambda f: f.type == "file.watcher.updated")
        assert added.properties == {"file": str(project_dir / "notes.md"), "event": "add"}
        (project_dir / "notes.md").unlink()
        removed = events.wait_for(lambda f: f.type == "file.watcher.updated" and f.properties["event"] == "unlink")
        assert removed.properties["file"] == str(project_dir / "notes.md")
        subprocess.run(["git", "checkout", "-q", "-b", "feature"], cwd=project_dir, check=True)
        assert events.wait_for(lambda f: f.type == "vcs.branch.updated").properties == {"branch": "feature"}
    watched = [f.properties["file"] for f in events.frames if f.type == "file.watcher.updated"]
    assert not any("build" in name or "/.git/" in name for name in watched)
