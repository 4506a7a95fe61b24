"""Revert and unrevert move only files inside the session's own directory, and only from snapshots
the project's shadow repository really recorded. The file lists and hashes they act on are read
from patch parts, which an import can plant at will: a list naming a file elsewhere (in the
parent directory, through ``..`` or a symbolic link) or a hash the repository never recorded is
refused with a 400 before any file moves, and no revert marker is set. And a server killed with
SIGKILL in the middle of moving them finishes the job at its next start: files and marker agree,
and no git child outlives the killed server."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import git_repository, running, text_prompt, wait_until
from tests.servers import ProcessServer, ThreadServer, process_server

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git knows it without ever storing it
NEVER_RECORDED = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def project(project_dir: Path) -> Path:
    """A repository whose root holds a file no session in ``sub`` may touch."""
    (project_dir / "outside.txt").write_text("the parent's\n")
    (project_dir / "sub").mkdir()
    (project_dir / "sub" / "inner.txt").write_text("inner\n")
    return git_repository(project_dir)


def _session_in_sub(client: httpx.Client, project: Path) -> str:
    """A session in ``sub`` whose one step wrote ``sub/made.txt`` (a real snapshot and patch)."""
    sid = client.post("/session", params={"directory": str(project / "sub")}).json()["id"]
    write = "TOOL:write " + json.dumps({"filePath": "made.txt", "content": "made\n"})
    assert client.post(f"/session/{sid}/message", json=text_prompt(write)).status_code == 200
    return str(sid)


def _plant(client: httpx.Client, project: Path, sid: str, **patch: Any) -> tuple[str, str]:
    """Import a copy of ``sid`` into ``sub`` whose patch part says ``patch`` instead; returns the
    copy's id and its user message."""
    messages = client.get(f"/session/{sid}/message").json()
    for message in messages:
        for part in message["parts"]:
            if part["type"] == "patch":
                part.update(patch)
    info = client.get(f"/session/{sid}").json() | {"id": "ses_0000000000000000000planted"}
    imported = client.post(
        "/opensession/import", params={"directory": str(project / "sub")}, json={"info": info, "messages": messages}
    )
    assert imported.status_code == 200, imported.text
    copy = imported.json()["id"]
    return copy, client.get(f"/session/{copy}/message").json()[0]["info"]["id"]


def _assert_refused(response: httpx.Response, naming: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["name"] == "RevertError" and naming in body["data"]["message"], body


@pytest.mark.parametrize("outside", ["outside.txt", "sub/../outside.txt", "../elsewhere.txt"])
def test_revert_refuses_files_outside_the_session_directory(
    server: ThreadServer, client: httpx.Client, project: Path, outside: str
) -> None:
    sid = _session_in_sub(client, project)
    (patch,) = [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "patch"]
    named = str(project) + "/" + outside
    copy, user = _plant(client, project, sid, files=[*patch["files"], named])
    _assert_refused(client.post(f"/session/{copy}/revert", json={"messageID": user}), "outside")
    assert (project / "outside.txt").read_text() == "the parent's\n"
    assert (project / "sub" / "made.txt").exists()  # nothing moved, not even the file inside
    assert "revert" not in client.get(f"/session/{copy}").json()


@pytest.mark.parametrize("snapshot", [NEVER_RECORDED, EMPTY_TREE, "--output=/tmp/planted"])
def test_revert_refuses_a_snapshot_the_repository_never_recorded(
    server: ThreadServer, client: httpx.Client, project: Path, snapshot: str
) -> None:
    sid = _session_in_sub(client, project)
    copy, user = _plant(client, project, sid, hash=snapshot, files=[str(project / "sub" / "inner.txt")])
    _assert_refused(client.post(f"/session/{copy}/revert", json={"messageID": user}), "snapshot")
    assert (project / "sub" / "inner.txt").read_text() == "inner\n"
    assert "revert" not in client.get(f"/session/{copy}").json()
    staged = client.post(f"/api/session/{copy}/revert/stage", json={"messageID": user})
    assert staged.status_code == 400 and staged.json()["_tag"] == "RevertError", staged.text


def test_revert_never_deletes_through_a_symbolic_link(
    server: ThreadServer, client: httpx.Client, project: Path
) -> None:
    sid = _session_in_sub(client, project)
    (patch,) = [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "patch"]
    (project / "sub" / "up").symlink_to("..")  # sub/up/outside.txt is the parent's file
    copy, user = _plant(client, project, sid, files=[*patch["files"], str(project / "sub" / "up" / "outside.txt")])
    reverted = client.post(f"/session/{copy}/revert", json={"messageID": user})
    assert reverted.status_code == 200, reverted.text
    assert (project / "outside.txt").read_text() == "the parent's\n"
    assert not (project / "sub" / "made.txt").exists()  # what the step really did is undone


def test_a_planted_step_snapshot_is_never_an_option_to_git(
    server: ThreadServer, client: httpx.Client, project: Path, tmp_path: Path
) -> None:
    """Diffs read step snapshots from the parts too: a "snapshot" that is a git option does not
    reach git (``--output`` would write the diff to any file the server can write)."""
    sid = _session_in_sub(client, project)
    target = tmp_path / "written-by-git"
    messages = client.get(f"/session/{sid}/message").json()
    for part in (p for m in messages for p in m["parts"] if p["type"] == "step-start"):
        part["snapshot"] = f"--output={target}"
    info = client.get(f"/session/{sid}").json() | {"id": "ses_00000000000000000options"}
    imported = client.post(
        "/opensession/import", params={"directory": str(project / "sub")}, json={"info": info, "messages": messages}
    )
    assert client.get(f"/session/{imported.json()['id']}/diff").json() == []
    assert not target.exists()


@pytest.mark.parametrize("patch", [{"hash": 7}, {"files": "made.txt"}, {"files": [{"name": "made.txt"}]}])
def test_a_malformed_patch_part_is_refused(
    server: ThreadServer, client: httpx.Client, project: Path, patch: dict[str, Any]
) -> None:
    sid = _session_in_sub(client, project)
    copy, user = _plant(client, project, sid, **patch)
    _assert_refused(client.post(f"/session/{copy}/revert", json={"messageID": user}), "malformed")
    assert (project / "sub" / "made.txt").exists()


MANY = 2_000  # files one step changes; a restore checks them out a hundred at a time

# Real git, except that once ARMED exists the second checkout (the second hundred files of a
# restore) writes its pid to PAUSED and waits: the moment the test kills the server.
SLOW_GIT = """#!{python}
import os, sys, time
armed, paused, count = {armed!r}, {paused!r}, {count!r}
if "checkout" in sys.argv and os.path.exists(armed):
    with open(count, "a") as seen:
        seen.write("x")
    if os.path.getsize(count) == 2:
        os.unlink(armed)
        with open(paused, "w") as mark:
            mark.write(str(os.getpid()))
        time.sleep(60)
os.execv({git!r}, [{git!r}, *sys.argv[1:]])
"""


@dataclass
class SlowGit:
    folder: Path

    def __post_init__(self) -> None:
        self.folder.mkdir()
        self.armed, self.paused, self.count = (self.folder / n for n in ("armed", "paused", "count"))
        shim = self.folder / "git"
        real = shutil.which("git") or "git"
        names = {"armed": str(self.armed), "paused": str(self.paused), "count": str(self.count)}
        shim.write_text(SLOW_GIT.format(python=sys.executable, git=real, **names))
        shim.chmod(0o755)

    def arm(self) -> None:
        self.paused.unlink(missing_ok=True)
        self.count.unlink(missing_ok=True)
        self.armed.touch()

    def paused_pid(self) -> int:
        wait_until(lambda: self.paused.exists() and self.paused.read_text() != "", timeout=30)
        return int(self.paused.read_text())


def _contents(folder: Path) -> Counter[str]:
    """How many files hold what (a file git is rewriting right now counts as "missing")."""
    found: Counter[str] = Counter()
    for path in folder.iterdir():
        try:
            found[path.read_text()] += 1
        except FileNotFoundError:
            found["missing"] += 1
    return found


def _killed_mid_restore(server: ProcessServer, git: SlowGit, path: str, body: dict[str, Any] | None = None) -> None:
    """POST ``path`` to the server, kill it -9 once its restore has put back a hundred files,
    and check the paused git died with it."""
    git.arm()

    def ask() -> None:
        with suppress(httpx.HTTPError):  # the server dies before it answers
            httpx.post(server.url + path, json=body, timeout=60)

    request = threading.Thread(target=ask)
    request.start()
    child = git.paused_pid()
    server.kill9()
    request.join()
    wait_until(lambda: not running(child))


def _settled(server: ProcessServer, sid: str, many: Path, content: str, *, reverted: bool) -> dict[str, Any]:
    """The session once every file holds ``content`` and it has a revert marker or not as
    ``reverted`` says (on PostgreSQL the restarted server finishes the revert once the dead
    server's lease has expired)."""
    info: dict[str, Any] = {}

    def agree() -> bool:
        info.clear()
        info.update(httpx.get(f"{server.url}/session/{sid}").json())
        return _contents(many) == {content: MANY} and ("revert" in info) == reverted

    wait_until(agree, timeout=30)
    return info


@pytest.mark.slow
def test_a_revert_killed_mid_restore_is_finished_at_the_next_start(
    database_url: str, project_dir: Path, config_dir: Path, tmp_path: Path
) -> None:
    """kill -9 while a revert (then an unrevert) has put back a hundred of 2,000 files: the next
    start finishes it, so files and marker agree, and no git outlives the killed server."""
    many = project_dir / "many"
    many.mkdir()
    for i in range(MANY):
        (many / f"f{i}.txt").write_text("before\n")
    git_repository(project_dir)
    git = SlowGit(tmp_path / "slow-git")
    server = process_server(database_url, project_dir, config_dir)
    server.env["PATH"] = f"{git.folder}{os.pathsep}{server.env['PATH']}"
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        step = text_prompt("TOOL:bash for f in many/*; do echo after > $f; done")
        assert httpx.post(f"{server.url}/session/{sid}/message", json=step, timeout=60).status_code == 200
        user = httpx.get(f"{server.url}/session/{sid}/message").json()[0]["info"]["id"]
        assert _contents(many) == {"after\n": MANY}
        _killed_mid_restore(server, git, f"/session/{sid}/revert", {"messageID": user})
        assert _contents(many) == {"before\n": 100, "after\n": MANY - 100}
        server.start()
        assert _settled(server, sid, many, "before\n", reverted=True)["revert"]["messageID"] == user
        _killed_mid_restore(server, git, f"/session/{sid}/unrevert")
        assert _contents(many) == {"after\n": 100, "before\n": MANY - 100}
        server.start()
        _settled(server, sid, many, "after\n", reverted=False)
    finally:
        server.stop()
