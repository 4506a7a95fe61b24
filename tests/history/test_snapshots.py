"""Per-step snapshots in a shadow git repository: steps record the tree, a step's changes are known
whoever made them (write, edit, bash), and undo/redo put files back. Real server, real git."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import create_session, git_repository, text_prompt
from tests.servers import ThreadServer, process_server
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _tool(name: str, **args: Any) -> str:
    return f"TOOL:{name} {json.dumps(args)}"


def _parts(client: httpx.Client, sid: str, kind: str) -> list[dict[str, Any]]:
    return [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == kind]


def _users(client: httpx.Client, sid: str) -> list[dict[str, Any]]:
    return [m["info"] for m in client.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]


@pytest.fixture
def repo(project_dir: Path) -> Path:
    (project_dir / "existing.txt").write_text("one\ntwo\n")
    (project_dir / "gone.txt").write_text("delete me\n")
    (project_dir / "bystander.txt").write_text("not the agent's\n")
    return git_repository(project_dir)


def test_steps_record_snapshots_and_the_files_they_changed(
    server: ThreadServer, client: httpx.Client, repo: Path
) -> None:
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt(_tool("write", filePath="new.txt", content="hi\n")))
    starts, finishes = _parts(client, sid, "step-start"), _parts(client, sid, "step-finish")
    assert len(starts) == len(finishes) == 2  # the tool step and the answer after it
    assert all(len(p["snapshot"]) == 40 for p in starts + finishes)
    assert starts[1]["snapshot"] == finishes[0]["snapshot"] != starts[0]["snapshot"]
    (patch,) = _parts(client, sid, "patch")
    assert patch["hash"] == starts[0]["snapshot"] and patch["files"] == [str(repo / "new.txt")]
    history = client.get(f"/api/session/{sid}/history").json()["data"]
    ended = [e["data"] for e in history if e["type"] == "session.next.step.ended"]
    assert ended[0]["files"] == [str(repo / "new.txt")] and ended[0]["snapshot"] == finishes[0]["snapshot"]
    assert not (repo / ".git" / "index").read_bytes().count(b"new.txt")  # the user's own index is untouched


def test_undo_and_redo_restore_what_write_edit_and_bash_changed(
    server: ThreadServer, client: httpx.Client, repo: Path
) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/message", json=text_prompt(_tool("write", filePath="hello.txt", content="hi\n")))
        client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash echo three >> existing.txt; rm gone.txt"))
        edit = _tool("edit", filePath="existing.txt", oldString="one", newString="ONE")
        client.post(f"/session/{sid}/message", json=text_prompt(edit))
        events.wait_for(lambda f: f.type == "session.diff" and len(f.properties["diff"]) == 3)
    assert (repo / "existing.txt").read_text() == "ONE\ntwo\nthree\n" and not (repo / "gone.txt").exists()

    diff = client.get(f"/session/{sid}/diff").json()
    assert [(d["file"], d["status"]) for d in diff] == [
        ("existing.txt", "modified"),
        ("gone.txt", "deleted"),
        ("hello.txt", "added"),
    ]
    assert diff[0]["patch"].startswith("Index: existing.txt\n") and "-one\n+ONE\n two\n+three\n" in diff[0]["patch"]
    assert client.get(f"/session/{sid}").json()["summary"] == {"additions": 3, "deletions": 2, "files": 3}
    u1, u2, u3 = _users(client, sid)
    by_bash = client.get(f"/session/{sid}/diff", params={"messageID": u2["id"]}).json()
    assert [d["file"] for d in by_bash] == ["existing.txt", "gone.txt"] == [d["file"] for d in u2["summary"]["diffs"]]
    (repo / "bystander.txt").write_text("edited by hand\n")  # the session never changed this file

    with EventCollector(f"{server.url}/event") as events:
        reverted = client.post(f"/session/{sid}/revert", json={"messageID": u2["id"]}).json()
        sidebar = events.wait_for(lambda f: f.type == "session.diff").properties["diff"]
    assert reverted["revert"]["messageID"] == u2["id"] and len(reverted["revert"]["snapshot"]) == 40
    assert "-three" in reverted["revert"]["diff"] and "+delete me" in reverted["revert"]["diff"]
    assert [d["file"] for d in sidebar] == ["hello.txt"]
    assert (repo / "existing.txt").read_text() == "one\ntwo\n" and (repo / "gone.txt").read_text() == "delete me\n"
    assert (repo / "hello.txt").exists()

    client.post(f"/session/{sid}/revert", json={"messageID": u1["id"]})
    assert not (repo / "hello.txt").exists() and (repo / "existing.txt").read_text() == "one\ntwo\n"
    client.post(f"/session/{sid}/revert", json={"messageID": u3["id"]})  # forward again: only the edit undone
    assert (repo / "existing.txt").read_text() == "one\ntwo\nthree\n" and not (repo / "gone.txt").exists()
    assert (repo / "hello.txt").read_text() == "hi\n"

    redone = client.post(f"/session/{sid}/unrevert").json()
    assert "revert" not in redone and redone["summary"]["files"] == 3
    assert (repo / "existing.txt").read_text() == "ONE\ntwo\nthree\n" and not (repo / "gone.txt").exists()
    assert (repo / "bystander.txt").read_text() == "edited by hand\n"

    client.post(f"/session/{sid}/revert", json={"messageID": u2["id"]})
    client.post(f"/session/{sid}/message", json=text_prompt("carry on"))  # commits the revert
    assert [u["id"] for u in _users(client, sid)][:2] == [u1["id"], _users(client, sid)[1]["id"]]
    assert len(_users(client, sid)) == 2 and (repo / "existing.txt").read_text() == "one\ntwo\n"
    assert (repo / "gone.txt").exists() and (repo / "bystander.txt").read_text() == "edited by hand\n"


def test_v2_revert_stage_lists_the_files_and_clear_puts_them_back(
    server: ThreadServer, client: httpx.Client, repo: Path
) -> None:
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash mkdir -p sub && echo x > sub/made.txt"))
    (user,) = _users(client, sid)
    staged = client.post(f"/api/session/{sid}/revert/stage", json={"messageID": user["id"], "files": True}).json()
    assert staged["data"]["messageID"] == user["id"] and staged["data"]["snapshot"]
    assert [(f["file"], f["status"], f["additions"]) for f in staged["data"]["files"]] == [("sub/made.txt", "added", 1)]
    assert not (repo / "sub" / "made.txt").exists()
    assert client.post(f"/api/session/{sid}/revert/clear").status_code == 204
    assert (repo / "sub" / "made.txt").read_text() == "x\n"


def test_an_aborted_step_still_records_what_its_tool_changed(
    server: ThreadServer, client: httpx.Client, repo: Path
) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo partial > half.txt; sleep 30"))
        events.wait_for(lambda f: f.type == "message.part.updated" and f.properties["part"].get("tool") == "bash")
        deadline = time.monotonic() + 5
        while not (repo / "half.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.post(f"/session/{sid}/abort").json() is True
        events.wait_idle(sid)
    (patch,) = _parts(client, sid, "patch")
    assert patch["files"] == [str(repo / "half.txt")]
    (user,) = _users(client, sid)
    client.post(f"/session/{sid}/revert", json={"messageID": user["id"]})
    assert not (repo / "half.txt").exists()


def test_no_snapshots_outside_git_or_when_configured_off(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt(_tool("write", filePath="a.txt", content="x\n")))
    assert all("snapshot" not in p for p in _parts(client, sid, "step-start") + _parts(client, sid, "step-finish"))
    assert _parts(client, sid, "patch") == [] and client.get(f"/session/{sid}/diff").json() == []
    (user,) = _users(client, sid)
    assert "snapshot" not in client.post(f"/session/{sid}/revert", json={"messageID": user["id"]}).json()["revert"]
    assert (project_dir / "a.txt").exists()  # as OpenCode: without a repository, undo moves only messages

    git_repository(project_dir)
    (project_dir / "opencode.json").write_text('{"snapshot": false}')
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt(_tool("write", filePath="b.txt", content="y\n")))
    assert all("snapshot" not in p for p in _parts(client, sid, "step-start"))


def test_a_missing_git_turns_snapshots_off_and_sessions_keep_working(
    server: ThreadServer, client: httpx.Client, repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=text_prompt(_tool("write", filePath="c.txt", content="z\n")))
    assert reply.status_code == 200 and (repo / "c.txt").read_text() == "z\n"
    assert all("snapshot" not in p for p in _parts(client, sid, "step-start"))


@pytest.mark.slow
def test_a_step_killed_mid_tool_gets_its_patch_at_restart(
    database_url: str, project_dir: Path, config_dir: Path
) -> None:
    """kill -9 while bash is writing: the restarted server records what the dead step changed,
    so undo still removes it."""
    repo = git_repository(project_dir)
    database = database_url
    server = process_server(database, repo, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        prompt = text_prompt("TOOL:bash echo started > crashed.txt; sleep 30")
        assert httpx.post(f"{server.url}/session/{sid}/prompt_async", json=prompt).status_code == 204
        deadline = time.monotonic() + 10
        while not (repo / "crashed.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        server.kill9()
    finally:
        server.stop()
    restarted = process_server(database, repo, config_dir)
    restarted.start()
    try:
        with httpx.Client(base_url=restarted.url, timeout=30) as client:
            deadline = time.monotonic() + 15
            while client.get("/session/status").json() != {} and time.monotonic() < deadline:
                time.sleep(0.1)
            patches = _parts(client, sid, "patch")
            assert [p["files"] for p in patches][:1] == [[str(repo / "crashed.txt")]]
            (user,) = _users(client, sid)
            client.post(f"/session/{sid}/revert", json={"messageID": user["id"]})
            assert not (repo / "crashed.txt").exists()
    finally:
        restarted.stop()


async def test_a_snapshot_sees_every_change_even_when_git_is_skipped(tmp_path: Path, database_url: str) -> None:
    """Small subtrees skip git while nothing moved; an edit that keeps the size, a new file and
    a deletion must each still give a new snapshot."""
    from app.config import ConfigLoader
    from app.runtime.snapshots import FileSnapshots

    repo = tmp_path / "tree"
    (repo / "sub").mkdir(parents=True)
    for name in ("a.txt", "sub/b.txt"):
        (repo / name).write_text("same size\n")
    git_repository(repo)
    snapshots = FileSnapshots(tmp_path / "data", ConfigLoader(str(tmp_path / "config")))
    directory = str(repo)
    await asyncio.sleep(2.1)  # older than the racy horizon: the next snapshot may skip git
    first = await snapshots.track(directory)
    assert first is not None and await snapshots.track(directory) == first

    (repo / "sub" / "b.txt").write_text("SAME SIZE\n")
    second = await snapshots.track(directory)
    assert await snapshots.changed(directory, first, second or "") == [str(repo / "sub" / "b.txt")]
    (repo / "sub" / "new.txt").write_text("x")
    (repo / "a.txt").unlink()
    third = await snapshots.track(directory)
    assert await snapshots.changed(directory, second or "", third or "") == [
        str(repo / "a.txt"),
        str(repo / "sub" / "new.txt"),
    ]


async def test_diffs_are_shaped_as_the_reference_server_shapes_them(tmp_path: Path, database_url: str) -> None:
    """Whole-file context, ``Index:`` headers, counts on every hunk header: byte for byte what
    OpenCode 1.18 answered for the same edits."""
    from app.config import ConfigLoader
    from app.runtime.snapshots import FileSnapshots

    repo = tmp_path / "tree"
    repo.mkdir()
    (repo / "nonl.txt").write_text("a\nb")
    (repo / "long.txt").write_text("".join(f"line{i}\n" for i in range(1, 31)))
    git_repository(repo)
    snapshots = FileSnapshots(tmp_path / "data", ConfigLoader(str(tmp_path / "config")))
    before = await snapshots.track(str(repo))
    (repo / "nonl.txt").write_text("a\nc")
    (repo / "long.txt").write_text((repo / "long.txt").read_text().replace("line15", "LINE15"))
    (repo / "newfile.txt").write_text("alpha beta")
    after = await snapshots.track(str(repo))
    assert before and after
    long, new, nonl = await snapshots.diff(str(repo), before, after)
    header = "Index: nonl.txt\n" + "=" * 67 + "\n--- nonl.txt\t\n+++ nonl.txt\t\n"
    body = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    assert nonl == {"file": "nonl.txt", "patch": header + body, "additions": 1, "deletions": 1, "status": "modified"}
    assert new["patch"].endswith("@@ -0,0 +1,1 @@\n+alpha beta\n\\ No newline at end of file\n")
    assert new["status"] == "added" and (new["additions"], new["deletions"]) == (1, 0)
    assert "@@ -1,30 +1,30 @@\n line1\n" in long["patch"] and " line14\n-line15\n+LINE15\n line16\n" in long["patch"]


async def test_a_restore_whose_time_has_run_out_moves_nothing(tmp_path: Path, database_url: str) -> None:
    """The time a restore is given (what is sure to remain of its lease) is asked before each
    step that moves files: none left, and nothing moves (OutOfTime); time left, and all do."""
    from app.config import ConfigLoader
    from app.runtime.snapshots import FileSnapshots, OutOfTime

    repo = tmp_path / "tree"
    repo.mkdir()
    (repo / "kept.txt").write_text("before\n")
    git_repository(repo)
    snapshots = FileSnapshots(tmp_path / "data", ConfigLoader(str(tmp_path / "config")))
    directory = str(repo)
    before = await snapshots.track(directory)
    assert before is not None
    (repo / "kept.txt").write_text("after\n")
    (repo / "new.txt").write_text("made after\n")
    changes = {str(repo / "kept.txt"): before, str(repo / "new.txt"): before}
    with pytest.raises(OutOfTime):
        await snapshots.restore(directory, changes, lambda: 0.0)
    assert (repo / "kept.txt").read_text() == "after\n" and (repo / "new.txt").exists()
    await snapshots.restore(directory, changes, lambda: 30.0)
    assert (repo / "kept.txt").read_text() == "before\n" and not (repo / "new.txt").exists()
