"""Git worktrees (``/experimental/worktree``) with real git, as OpenCode's server answers them: a
worktree is created on ``opencode/<name>`` in the data directory and announced on
``/global/event`` once filled, a session in it belongs to the main project and works there only,
it is reset to the default branch and removed with its branch. Unlike OpenCode, a directory that
is not one of the project's worktrees is never deleted (OpenCode deletes any directory it is
given); the TUI's start-up calls around workspaces answer as OpenCode's do."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from app.wire import Worktree
from tests.helpers import git_repository, running, text_prompt, wait_until
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector


def _git(cwd: Path | str, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _repository(project_dir: Path) -> str:
    (project_dir / "committed.txt").write_text("from the main tree\n")
    git_repository(project_dir)
    (project_dir / "uncommitted.txt").write_text("only here\n")
    return _git(project_dir, "rev-list", "--max-parents=0", "HEAD").strip()


def _ready_worktree(server: ThreadServer, client: httpx.Client, name: str) -> Path:
    """A new worktree of the server's project, once it is filled."""
    with EventCollector(f"{server.url}/global/event") as events:
        made = client.post("/experimental/worktree", json={"name": name})
        assert made.status_code == 200, made.text
        events.wait_for(lambda f: f.type == "worktree.ready")
    return Path(made.json()["directory"])


def test_a_worktree_is_created_worked_in_reset_and_removed(
    server: ThreadServer,
    client: httpx.Client,
    project_dir: Path,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # start commands run in a login shell: not the user's profile
    root = _repository(project_dir)
    main_files = sorted(p.name for p in project_dir.iterdir())
    client.patch(f"/project/{root}", json={"commands": {"start": "echo project > started-by-project"}})
    with EventCollector(f"{server.url}/global/event") as events:
        response = client.post("/experimental/worktree", json={"name": "Probe Tree!", "startCommand": "touch extra"})
        assert response.status_code == 200, response.text
        tree = response.json()
        directory = str(settings.data_path / "worktree" / root / "probe-tree")
        assert tree == {"name": "probe-tree", "branch": "opencode/probe-tree", "directory": directory}
        ready = events.wait_for(lambda f: f.type == "worktree.ready")
        assert ready.data["directory"] == directory and ready.data["project"] == root
        assert ready.properties == {"name": "probe-tree", "branch": "opencode/probe-tree"}
        updated = events.wait_for(lambda f: f.type == "project.updated")
        assert updated.properties["id"] == root and updated.properties["sandboxes"] == [directory]
        assert updated.properties["worktree"] == str(project_dir)
    worktree = Path(directory)
    assert (worktree / "committed.txt").read_text() == "from the main tree\n"
    assert not (worktree / "uncommitted.txt").exists()  # only what is committed arrives
    wait_until(lambda: (worktree / "extra").exists())  # the project's start command, then the request's
    assert (worktree / "started-by-project").read_text() == "project\n"
    assert client.get("/experimental/worktree").json() == [directory]
    current = client.get("/project/current", params={"directory": directory}).json()
    assert current["id"] == root and current["worktree"] == str(project_dir) and current["sandboxes"] == [directory]
    assert client.get("/vcs", params={"directory": directory}).json()["branch"] == "opencode/probe-tree"

    # A session in the worktree belongs to the main project and writes there only.
    session = client.post("/session", params={"directory": directory}, json={}).json()
    assert session["projectID"] == root and session["directory"] == directory
    write = 'TOOL:write {"filePath": "agent.txt", "content": "by the agent\\n"}'
    reply = client.post(f"/session/{session['id']}/message", json=text_prompt(write))
    assert reply.status_code == 200, reply.text
    assert (worktree / "agent.txt").read_text() == "by the agent\n"
    assert sorted(p.name for p in project_dir.iterdir()) == main_files
    assert session["id"] not in [s["id"] for s in client.get("/session").json()]  # listed per directory
    assert client.get("/project").json()[0]["id"] == root and len(client.get("/project").json()) == 1

    # Reset: local commits and every change gone, the branch back at the default branch.
    _git(worktree, "add", "agent.txt")
    _git(worktree, "commit", "-q", "-m", "local")
    (worktree / "committed.txt").write_text("changed\n")
    head = _git(project_dir, "rev-parse", "HEAD").strip()
    response = client.post("/experimental/worktree/reset", json={"directory": directory})
    assert response.status_code == 200 and response.json() is True, response.text
    assert _git(worktree, "rev-parse", "HEAD").strip() == head
    assert _git(project_dir, "rev-parse", "opencode/probe-tree").strip() == head
    assert not (worktree / "agent.txt").exists() and (worktree / "committed.txt").read_text() == "from the main tree\n"
    assert not (worktree / "extra").exists()
    wait_until(lambda: (worktree / "started-by-project").exists())  # the project's start command ran again
    assert _git(worktree, "status", "--porcelain") == "?? started-by-project\n"

    # Remove: the instance is disposed, the directory and the branch are gone.
    with EventCollector(f"{server.url}/global/event") as events:
        response = client.request("DELETE", "/experimental/worktree", json={"directory": directory})
        assert response.status_code == 200 and response.json() is True, response.text
        disposed = events.wait_for(lambda f: f.type == "server.instance.disposed")
        assert disposed.data["directory"] == directory
        assert events.wait_for(lambda f: f.type == "project.updated").properties["sandboxes"] == []
    assert not worktree.exists()
    assert "opencode/probe-tree" not in _git(project_dir, "branch", "--list")
    assert client.get("/experimental/worktree").json() == []
    assert sorted(p.name for p in project_dir.iterdir()) == main_files


def _refused(response: httpx.Response, name: str, message: str | None = None) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["name"] == name, body
    if message is not None:
        assert body["data"]["message"] == message


def test_refusals_leave_every_other_directory_alone(
    server: ThreadServer, client: httpx.Client, project_dir: Path, settings: Settings, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "not-git"
    elsewhere.mkdir()
    in_plain = {"directory": str(elsewhere)}
    not_git = "Worktrees are only supported for git projects"
    _refused(client.post("/experimental/worktree", params=in_plain), "WorktreeNotGitError", not_git)
    assert client.get("/experimental/worktree", params=in_plain).json() == []
    for method, path in (("POST", "/experimental/worktree/reset"), ("DELETE", "/experimental/worktree")):
        answer = client.request(method, path, params=in_plain, json={"directory": str(elsewhere)})
        _refused(answer, "WorktreeNotGitError", not_git)

    root = _repository(project_dir)
    reset, remove = "/experimental/worktree/reset", "/experimental/worktree"
    _refused(client.post(reset, json={"directory": str(project_dir)}), "WorktreeResetFailedError")
    main_tree = f"fatal: '{project_dir}' is a main working tree\n"
    main, nowhere = {"directory": str(project_dir)}, {"directory": str(tmp_path / "nope")}
    _refused(client.request("DELETE", remove, json=main), "WorktreeRemoveFailedError", main_tree)
    _refused(client.post(reset, json=nowhere), "WorktreeResetFailedError", "Worktree not found")
    assert client.request("DELETE", remove, json=nowhere).json() is True

    # Directories that exist but are no worktree of this project's are refused and kept: one
    # anywhere, one forged in the worktree directory, and a worktree the user made elsewhere.
    victim = tmp_path / "victim"
    forged = settings.data_path / "worktree" / root / "forged"
    mine = tmp_path / "users-own"
    for directory in (victim, forged):
        directory.mkdir(parents=True)
        (directory / "keep.txt").write_text("keep")
    _git(project_dir, "worktree", "add", "-q", "-b", "users-own", str(mine))
    for directory in (victim, forged, mine):
        _refused(client.request("DELETE", remove, json={"directory": str(directory)}), "WorktreeRemoveFailedError")
        _refused(client.post(reset, json={"directory": str(directory)}), "WorktreeResetFailedError")
    assert (victim / "keep.txt").exists() and (forged / "keep.txt").exists() and (mine / "committed.txt").exists()
    assert "users-own" in _git(project_dir, "branch", "--list")

    # A taken name gets a random suffix; request bodies of the wrong shape are 400s.
    first = client.post("/experimental/worktree", json={"name": "twin"}).json()
    second = client.post("/experimental/worktree", json={"name": "twin"}).json()
    assert first["name"] == "twin" and second["name"].startswith("twin-")
    assert second["branch"] == f"opencode/{second['name']}"
    assert client.post("/experimental/worktree").json()["branch"].startswith("opencode/")  # no body: a random name
    _refused(client.post("/experimental/worktree", json={"name": 5}), "BadRequest")
    _refused(client.post(reset, json={}), "BadRequest")
    _refused(client.request("DELETE", remove), "BadRequest")
    _refused(client.request("DELETE", remove, json={"directory": "relative/path"}), "BadRequest")
    listed = client.get("/experimental/worktree").json()
    assert len(listed) == 3
    server.stop()
    with thread_server(settings) as again, httpx.Client(base_url=again.url) as fresh:
        assert fresh.get("/experimental/worktree").json() == listed  # kept with the project


def test_a_worktree_create_sent_again_with_its_idempotency_key_makes_one(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """nginx passes a POST whose replica died mid-request to another replica with the same
    Idempotency-Key (and a client may retry): the copy answers the worktree the first made, not a
    second one under a suffixed name; the key asking for another worktree is a 409."""
    _repository(project_dir)
    keyed = {"Idempotency-Key": "tree-once"}
    with EventCollector(f"{server.url}/global/event") as events:
        first = client.post("/experimental/worktree", json={"name": "twin"}, headers=keyed)
        assert first.status_code == 200, first.text
        events.wait_for(lambda f: f.type == "worktree.ready")
    again = client.post("/experimental/worktree", json={"name": "twin"}, headers=keyed)
    assert again.status_code == 200 and again.json() == first.json(), again.text
    assert client.get("/experimental/worktree").json() == [first.json()["directory"]]
    assert _git(project_dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/opencode").split() == [
        "opencode/twin"
    ]
    other = client.post("/experimental/worktree", json={"name": "other"}, headers=keyed)
    assert other.status_code == 409 and "tree-once" in other.text, other.text
    unkeyed = client.post("/experimental/worktree", json={"name": "twin"})
    assert unkeyed.status_code == 200 and unkeyed.json()["name"].startswith("twin-")
    assert len(client.get("/experimental/worktree").json()) == 2


def test_the_tuis_workspace_start_up_calls(client: httpx.Client) -> None:
    for directory in (None, "relative"):
        params = {"directory": directory} if directory else {}
        assert client.get("/experimental/workspace", params=params).json() == []
        assert client.get("/experimental/workspace/status", params=params).json() == []
        assert client.get("/experimental/capabilities", params=params).json() == {"backgroundSubagents": False}
        console = client.get("/experimental/console", params=params).json()
        assert console == {"consoleManagedProviders": [], "switchableOrgCount": 0}
        adapters = client.get("/experimental/workspace/adapter", params=params).json()
        assert adapters == [{"type": "worktree", "name": "Worktree", "description": "Create a git worktree"}]


def test_a_fill_is_claimed_by_one_filler_and_found_cut_short_once_its_claim_is_free(
    project_dir: Path, tmp_path: Path
) -> None:
    """The claim is a ``flock``: a second claim (another process's, or another task's) fails while
    the first is held; a recorded fill whose claim is free is handed out once, claimed."""
    from app.runtime.worktrees import _fills as fills

    _repository(project_dir)
    root = tmp_path / "data" / "worktree"
    tree = root / "project" / "one"
    _git(project_dir, "worktree", "add", "--no-checkout", "-b", "opencode/one", str(tree))
    fill = fills.PendingFill({"name": "one", "branch": "opencode/one", "directory": str(tree)}, str(project_dir), "")
    held = fills.claim(str(tree))
    assert held is not None
    fills.record(fill)
    assert fills.claim(str(tree)) is None
    assert fills.claim_cut_short([root / "project"]) == []  # being filled
    held.release()
    [(found, again)] = fills.claim_cut_short([root / "project"])
    assert found == fill
    assert fills.claim_cut_short([root / "project"]) == []  # claimed by the first finder
    fills.done(str(tree))
    again.release()
    assert fills.claim_cut_short([root / "project"]) == []  # done
    assert fills.claim(str(project_dir)) is None  # the main tree is no worktree to fill


def test_a_running_server_fills_and_lists_a_worktree_whose_maker_died_before_listing_it(
    server: ThreadServer, client: httpx.Client, project_dir: Path, settings: Settings
) -> None:
    """What a process sharing the data directory leaves when it dies right after recording a
    fill: a worktree added, empty and not listed in its project, with the ``index.lock`` of the
    fill's git, killed with it. The running server's sweep fills it and lists it."""
    from app.runtime.worktrees import _fills as fills

    root = _repository(project_dir)
    tree = Path(settings.data_dir) / "worktree" / root / "orphan"
    _git(project_dir, "worktree", "add", "--no-checkout", "-b", "opencode/orphan", str(tree))
    made: Worktree = {"name": "orphan", "branch": "opencode/orphan", "directory": str(tree)}
    (project_dir / ".git" / "worktrees" / "orphan" / "index.lock").write_text("")
    assert client.get("/experimental/worktree").json() == []
    with EventCollector(f"{server.url}/global/event") as events:
        fills.record(fills.PendingFill(made, str(project_dir), ""))
        ready = events.wait_for(lambda f: f.type == "worktree.ready", timeout=fills.SWEEP_SECONDS + 10)
    assert ready.properties == {"name": "orphan", "branch": "opencode/orphan"}
    assert (tree / "committed.txt").read_text() == "from the main tree\n"
    assert client.get("/experimental/worktree").json() == [str(tree)]


def _cut_short_add(tree: Path, main: Path, *, key: str | None = None) -> Worktree:
    """The journal of an add of ``tree`` whose maker died (its lock let go, never settled)."""
    from app.jsonutil import dumps
    from app.runtime.worktrees import _adds as adds
    from app.runtime.worktrees import _fills as fills
    from app.runtime.worktrees._requests import RequestMark

    made: Worktree = {"name": tree.name, "branch": f"opencode/{tree.name}", "directory": str(tree)}
    tree.parent.mkdir(parents=True, exist_ok=True)
    journal = adds.begin_add(tree)
    assert journal is not None
    request = None if key is None else RequestMark(key, dumps([tree.name, None]), made)
    adds.write(journal, fills.PendingFill(made, str(main), ""), request)
    journal.release()
    return made


@pytest.mark.parametrize("retried_at_once", [False, True])
@pytest.mark.parametrize("left", ["locked", "an empty commondir"])
def test_an_add_cut_short_mid_git_is_undone_and_git_works_again(
    left: str,
    retried_at_once: bool,
    server: ThreadServer,
    client: httpx.Client,
    project_dir: Path,
    settings: Settings,
) -> None:
    """A maker killed while ``git worktree add`` ran (its git killed with it) leaves the worktree
    unfinished: still locked ("initializing"), and sometimes with an empty ``commondir``, which
    makes git refuse every worktree command in the repository (both seen with kill -9 on git
    2.39). The sweep removes what the add began, or the request's retry does if it comes first;
    the retry then makes the worktree."""
    from app.runtime.worktrees import _fills as fills

    root = _repository(project_dir)
    tree = Path(settings.data_dir) / "worktree" / root / "midway"
    _cut_short_add(tree, project_dir, key="midway-once")
    _git(project_dir, "worktree", "add", "--no-checkout", "-b", "opencode/midway", str(tree))
    admin = project_dir / ".git" / "worktrees" / "midway"
    (admin / "locked").write_text("initializing")
    if left == "an empty commondir":
        (admin / "commondir").write_text("")
        broken = subprocess.run(["git", "worktree", "list"], cwd=project_dir, capture_output=True, text=True)
        assert broken.returncode != 0 and "commondir" in broken.stderr
    if not retried_at_once:  # else (before the sweep, as a rule) the retry finds the add cut short itself
        wait_until(lambda: not list(tree.parent.glob(".*.adding")), timeout=fills.SWEEP_SECONDS + 10)  # undone last
        assert not tree.exists() and not admin.exists()
        assert _git(project_dir, "branch", "--list", "opencode/*") == ""
        assert _git(project_dir, "worktree", "list", "--porcelain").count("worktree ") == 1
    with EventCollector(f"{server.url}/global/event") as events:
        keyed = {"Idempotency-Key": "midway-once"}
        again = client.post("/experimental/worktree", json={"name": "midway"}, headers=keyed)
        assert again.status_code == 200 and again.json()["directory"] == str(tree), again.text
        events.wait_for(lambda f: f.type == "worktree.ready")
    assert (tree / "committed.txt").read_text() == "from the main tree\n"
    assert client.get("/experimental/worktree").json() == [str(tree)]


def test_an_add_cut_short_before_git_made_the_worktree_leaves_nothing_behind(
    server: ThreadServer, client: httpx.Client, project_dir: Path, settings: Settings
) -> None:
    """A maker killed after git created the branch and began the tree's directory, before the
    worktree was registered: the sweep removes the directory and the branch, and the name is
    free again for the request's retry."""
    from app.runtime.worktrees import _fills as fills

    root = _repository(project_dir)
    tree = Path(settings.data_dir) / "worktree" / root / "begun"
    _cut_short_add(tree, project_dir, key="begun-once")
    _git(project_dir, "branch", "opencode/begun")
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {project_dir / '.git' / 'worktrees' / 'begun'}\n")
    wait_until(lambda: not list(tree.parent.glob(".*.adding")), timeout=fills.SWEEP_SECONDS + 10)  # undone last
    assert not tree.exists()
    assert _git(project_dir, "branch", "--list", "opencode/*") == ""
    assert client.get("/experimental/worktree").json() == []
    again = client.post("/experimental/worktree", json={"name": "begun"}, headers={"Idempotency-Key": "begun-once"})
    assert again.status_code == 200 and again.json()["directory"] == str(tree), again.text


def test_a_removal_cut_short_after_git_removed_the_tree_is_finished_by_its_retry(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """What a process sharing the data directory leaves when it dies right after
    ``git worktree remove``: its journal, the branch and the project's entry. The request's
    retry (or the sweep, if it comes first) deletes the branch and the entry, and settles the
    journal; until then no new worktree takes the name."""
    from app.runtime.worktrees import _removals as removals

    _repository(project_dir)
    tree = _ready_worktree(server, client, "halfway")
    real = os.path.realpath(tree)
    journal = removals.begin_removal(removals.Removal(str(project_dir), str(tree), real, "opencode/halfway"))
    assert journal is not None
    journal.release()
    _git(project_dir, "worktree", "remove", "--force", str(tree))
    assert removals.begin_removal(removals.Removal(str(project_dir), str(tree), real, None)) is None
    again = client.request("DELETE", "/experimental/worktree", json={"directory": str(tree)})
    assert again.status_code == 200 and again.json() is True, again.text
    assert client.get("/experimental/worktree").json() == []
    assert _git(project_dir, "branch", "--list", "opencode/*") == ""
    assert list(tree.parent.glob(".*")) == []
    made = client.post("/experimental/worktree", json={"name": "halfway"})
    assert made.status_code == 200 and made.json()["directory"] == str(tree), made.text


def test_a_removal_waits_while_another_process_fills_the_worktree(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """A removal sent to one process while another fills the worktree (the create went there)
    failed halfway: git deleting the tree while another git wrote it ("Directory not empty"),
    bench/worktree_kills.py. It waits for the filler's claim, which every fill and reset holds,
    and creates meanwhile are not held up."""
    from app.runtime.worktrees import _fills as fills

    _repository(project_dir)
    tree = _ready_worktree(server, client, "busy")
    held = fills.claim(str(tree))  # as the other process's fill holds it
    assert held is not None
    try:
        with ThreadPoolExecutor(1) as pool:
            removing = pool.submit(client.request, "DELETE", "/experimental/worktree", json={"directory": str(tree)})
            time.sleep(0.5)
            assert not removing.done() and tree.exists()
            other = client.post("/experimental/worktree", json={"name": "meanwhile"})  # not held up
            assert other.status_code == 200 and not removing.done(), other.text
            held.release()
            removed = removing.result(timeout=30)
    finally:
        held.release()
    assert removed.status_code == 200 and not tree.exists(), removed.text
    branches = _git(project_dir, "branch", "--list", "opencode/*", "--format=%(refname:short)")
    assert branches.split() == ["opencode/meanwhile"]


def test_a_removal_waits_for_another_processs_removal_of_the_worktree(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """A removal's retry that reaches a process while another one removes the worktree (the
    sweep finishing the first try, cut short) answered 400 "being removed by another process",
    though the worktree went (bench/worktree_kills.py). It waits for that removal, then answers
    that the worktree is gone."""
    from app.runtime.worktrees import _removals as removals

    _repository(project_dir)
    tree = _ready_worktree(server, client, "twice")
    real = os.path.realpath(tree)
    journal = removals.begin_removal(removals.Removal(str(project_dir), str(tree), real, "opencode/twice"))
    assert journal is not None  # held, as the other process holds it
    try:
        with ThreadPoolExecutor(1) as pool:
            removing = pool.submit(client.request, "DELETE", "/experimental/worktree", json={"directory": str(tree)})
            time.sleep(0.5)
            assert not removing.done()
            _git(project_dir, "worktree", "remove", "--force", str(tree))  # what the other process does
            _git(project_dir, "branch", "-D", "opencode/twice")
            journal.settle()
            removed = removing.result(timeout=30)
    finally:
        journal.release()
    assert removed.status_code == 200 and removed.json() is True, removed.text
    assert client.get("/experimental/worktree").json() == []


def test_a_failed_add_leaves_no_branch_and_adds_wait_for_the_repositorys_lock(
    client: httpx.Client, project_dir: Path
) -> None:
    """git creates a new worktree's branch first and keeps it when the worktree cannot be made:
    the failed create deletes it. Adds take a lock in the repository's git directory, which every
    process sharing the repository takes around its worktree changes (git reading a worktree
    another git is writing fails)."""
    import fcntl

    _repository(project_dir)
    blocker = project_dir / ".git" / "worktrees"
    blocker.write_text("not a directory")
    failed = client.post("/experimental/worktree", json={"name": "blocked"})
    assert failed.status_code == 400 and failed.json()["name"] == "WorktreeCreateFailedError", failed.text
    assert _git(project_dir, "branch", "--list", "opencode/*") == ""
    blocker.unlink()
    lock = os.open(project_dir / ".git" / "opensession-worktrees.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with ThreadPoolExecutor(1) as pool:
            made = pool.submit(client.post, "/experimental/worktree", json={"name": "waits"})
            time.sleep(0.5)
            assert not made.done()
            fcntl.flock(lock, fcntl.LOCK_UN)
            assert made.result(timeout=30).status_code == 200
    finally:
        os.close(lock)


def test_a_repository_whose_worktrees_git_cannot_list_is_refused_in_gits_words(
    client: httpx.Client, project_dir: Path
) -> None:
    """A half-written worktree the server did not make (a user's ``git worktree add`` killed
    midway) breaks ``git worktree list`` for the whole repository: a create answers what git
    says, not that the project is not a git repository."""
    _repository(project_dir)
    broken = project_dir / ".git" / "worktrees" / "theirs"
    broken.mkdir(parents=True)
    (broken / "gitdir").write_text("/elsewhere/theirs/.git\n")
    (broken / "commondir").write_text("")
    refused = client.post("/experimental/worktree", json={"name": "mine"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["name"] == "WorktreeCreateFailedError" and "commondir" in refused.text, refused.text
    assert "git worktree prune" in refused.json()["data"]["message"]
    assert broken.exists()  # not the server's to remove


def test_a_repository_lock_that_cannot_be_opened_does_not_fail_the_add(client: httpx.Client, project_dir: Path) -> None:
    """Where the lock file that serializes the adds cannot be opened (a read-only git directory;
    here, as root, a directory in its place), the add goes on without it, and git says whatever
    else it cannot do: never a 500."""
    _repository(project_dir)
    (project_dir / ".git" / "opensession-worktrees.lock").mkdir()
    made = client.post("/experimental/worktree", json={"name": "unlocked"})
    assert made.status_code == 200, made.text


def test_a_start_command_that_leaves_a_server_running_does_not_hold_up_the_next(
    server: ThreadServer,
    client: httpx.Client,
    project_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The project's start command starts a server with ``&`` (it keeps the output open): the
    request's own start command still runs once that shell has exited, and the server runs on
    until the worktree is removed."""
    monkeypatch.setenv("HOME", str(tmp_path))
    root = _repository(project_dir)
    client.patch(f"/project/{root}", json={"commands": {"start": "(sleep 30; echo never) & echo $! > server.pid"}})
    made = client.post("/experimental/worktree", json={"name": "served", "startCommand": "touch after-the-server"})
    assert made.status_code == 200, made.text
    tree = Path(made.json()["directory"])
    wait_until(lambda: (tree / "after-the-server").exists(), timeout=15)
    runner = int((tree / "server.pid").read_text())
    try:
        assert running(runner)
        removed = client.request("DELETE", "/experimental/worktree", json={"directory": str(tree)})
        assert removed.status_code == 200, removed.text
        wait_until(lambda: not running(runner))
    finally:
        if running(runner):
            os.killpg(os.getpgid(runner), signal.SIGKILL)


def test_a_worktree_whose_listing_failed_is_still_filled_and_listed(
    server: ThreadServer, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database refuses the write that lists a new worktree (it went away for a moment): the
    request fails, and the worktree it made is not left empty and unlisted, held by a claim
    nobody will use. The sweep fills it and lists it."""
    from app.runtime.worktrees import _fills as fills
    from app.store.database import DatabaseUnavailable

    _repository(project_dir)
    sessions = server.runtime.worktrees._sessions
    change = sessions.change_sandboxes
    refused: list[dict[str, Any]] = []

    async def refusing_once(directory: str, **changes: Any) -> None:
        if not refused:
            refused.append(changes)
            raise DatabaseUnavailable("the database went away")
        await change(directory, **changes)

    monkeypatch.setattr(sessions, "change_sandboxes", refusing_once)
    with EventCollector(f"{server.url}/global/event") as events:
        made = client.post("/experimental/worktree", json={"name": "unlisted"})
        assert made.status_code == 503, made.text
        ready = events.wait_for(lambda f: f.type == "worktree.ready", timeout=fills.SWEEP_SECONDS + 10)
    assert ready.properties["name"] == "unlisted"
    [tree] = client.get("/experimental/worktree").json()
    assert (Path(tree) / "committed.txt").read_text() == "from the main tree\n"


def test_a_reset_after_a_git_killed_in_the_worktree_is_not_refused_by_its_lock(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """A server killed during a fill or a reset takes its git along, which leaves ``index.lock``
    in the worktree's git directory; the next reset, which holds the tree's claim, drops it
    rather than fail on it."""
    _repository(project_dir)
    tree = _ready_worktree(server, client, "locked")
    (project_dir / ".git" / "worktrees" / "locked" / "index.lock").write_text("")
    (tree / "committed.txt").write_text("changed in the worktree\n")
    reset = client.post("/experimental/worktree/reset", json={"directory": str(tree)})
    assert reset.status_code == 200 and reset.json() is True, reset.text
    assert (tree / "committed.txt").read_text() == "from the main tree\n"


@pytest.mark.parametrize("gone", [".git", "the whole tree"])
def test_a_removal_cut_short_after_the_trees_git_file_went_is_finished_by_the_next(
    server: ThreadServer, client: httpx.Client, project_dir: Path, gone: str
) -> None:
    """``git worktree remove`` killed with its server may have deleted the tree's ``.git`` file
    and not the rest; git then refuses to remove the tree at all ("validation failed"). The next
    removal finishes the deletion, prunes the worktree and deletes its branch."""
    _repository(project_dir)
    tree = _ready_worktree(server, client, "halfway")
    if gone == ".git":
        (tree / ".git").unlink()
    else:
        shutil.rmtree(tree)
    removed = client.request("DELETE", "/experimental/worktree", json={"directory": str(tree)})
    assert removed.status_code == 200 and removed.json() is True, removed.text
    assert not tree.exists()
    assert client.get("/experimental/worktree").json() == []
    assert str(tree) not in _git(project_dir, "worktree", "list")
    assert _git(project_dir, "branch", "--list", "opencode/halfway") == ""
