"""Placement across machines that do not share the project directories: a session drains on a
process whose machine has its directory, whichever process took the prompt.

Two processes on one PostgreSQL database play two machines: B runs in a mount namespace of its
own, where an empty filesystem hides A's project directory, so A sees the project and B does not
(as on two machines without a shared volume)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.helpers import git_repository, text_prompt
from tests.processes.test_cluster import _answered, _history_when, cluster_url  # noqa: F401  (fixture)
from tests.servers import ProcessServer, process_server, start_together
from tests.sse import EventCollector

pytestmark = pytest.mark.slow

ONLY_ON_A = "this line is only on machine A"


def _namespaces_allowed() -> bool:
    """Whether this machine lets a process have a mount namespace of its own (root in a
    container that allows it: CI's machines do)."""
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(params=[None], ids=["open"])
def machines(
    request: pytest.FixtureRequest,
    cluster_url: str,  # noqa: F811
    tmp_path: Path,
    config_dir: Path,
) -> Iterator[tuple[ProcessServer, ProcessServer, Path]]:
    """Process A, whose machine has the project; process B, whose machine does not (it serves a
    project of its own); and the project. Both with the password ``request.param``, if any."""
    if not _namespaces_allowed():
        pytest.skip("this machine allows no mount namespace of a process's own (unshare -m), which B needs")
    machine_a = tmp_path / "machine-a"
    project = machine_a / "project"
    project.mkdir(parents=True)
    (project / "hello.txt").write_text(f"{ONLY_ON_A}\n")
    b_project = tmp_path / "machine-b" / "project"
    b_project.mkdir(parents=True)
    a = process_server(cluster_url, project, config_dir, data_dir=tmp_path / "data-a")
    b = process_server(cluster_url, b_project, config_dir, data_dir=tmp_path / "data-b")
    hide = 'mount -t tmpfs tmpfs "$0" && exec "$@"'  # B's view: machine-a is an empty directory
    b.args = ["unshare", "-m", "--propagation", "private", "sh", "-c", hide, str(machine_a), *b.args]
    if request.param is not None:
        for server in (a, b):
            server.env["OPENCODE_SERVER_PASSWORD"] = request.param
            server.auth = ("opencode", request.param)
    try:
        start_together(a, b)
        _until_b_forwards_to_a(b, project)
        yield a, b, project
    finally:
        b.stop()
        a.stop()


def _until_b_forwards_to_a(b: ProcessServer, project: Path) -> None:
    """Until B has heard of A (a newcomer hears from the others within milliseconds of its start;
    until then B serves everything itself): B's read of A's file comes back with its content."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        read = httpx.get(f"{b.url}/file/content", params={"path": "hello.txt", "directory": str(project)}, auth=b.auth)
        if read.status_code == 200 and ONLY_ON_A in read.text:
            return
        time.sleep(0.02)
    raise AssertionError(f"B never forwarded a read of A's directory: {read.status_code} {read.text[:200]}")


def _tool_part(history: list[dict]) -> dict:
    return next(p for m in history for p in m["parts"] if p["type"] == "tool")


def test_a_prompt_taken_where_the_directory_is_missing_is_drained_where_it_is(
    machines: tuple[ProcessServer, ProcessServer, Path],
) -> None:
    a, b, project = machines
    sid = httpx.post(f"{a.url}/session").json()["id"]
    assert httpx.get(f"{b.url}/session/{sid}").json()["directory"] == str(project)
    for turn in range(2):
        prompt = text_prompt("SLOW:0.2\nTOOL:read hello.txt")  # slow enough to see it busy
        assert httpx.post(f"{b.url}/session/{sid}/prompt_async", json=prompt).status_code == 204
        assert sid in httpx.get(f"{b.url}/session/status").json()  # busy everywhere from the 204
        history = _history_when(b.url, sid, _answered(2 * (turn + 1)))
        tool = _tool_part(history[-2:] if turn else history)
        assert tool["state"]["status"] == "completed", tool["state"]
        assert ONLY_ON_A in tool["state"]["output"]  # read on A's machine: B has no such file


def test_a_session_whose_directory_no_live_process_has_is_still_answered(
    machines: tuple[ProcessServer, ProcessServer, Path], tmp_path: Path
) -> None:
    """Every process asked lacks the directory: the one that took the prompt drains it (its tools
    fail on the missing files, as they would anywhere). The same once A, which has it, is dead."""
    a, b, _ = machines
    nowhere = tmp_path / "nowhere"
    sid = httpx.post(f"{b.url}/session", params={"directory": str(nowhere)}).json()["id"]
    assert httpx.post(f"{b.url}/session/{sid}/prompt_async", json=text_prompt("TOOL:read hello.txt")).status_code == 204
    tool = _tool_part(_history_when(b.url, sid, _answered(1), timeout=15))
    assert tool["state"]["status"] == "error"

    on_a = httpx.post(f"{a.url}/session").json()["id"]
    a.kill9()
    sent = httpx.post(f"{b.url}/session/{on_a}/prompt_async", json=text_prompt("TOOL:read hello.txt"))
    assert sent.status_code == 204
    history = _history_when(b.url, on_a, _answered(1), timeout=30)
    assert _tool_part(history)["state"]["status"] == "error"  # drained on B, which lacks the file


def test_prompts_sent_to_both_machines_at_once_are_all_drained_where_the_directory_is(
    machines: tuple[ProcessServer, ProcessServer, Path],
) -> None:
    """Prompts race in through both processes: each is answered once, and every answer was
    drained on A (B's admissions leave the session to A, whether A drains it already or not)."""
    a, b, _ = machines
    sids = [httpx.post(f"{a.url}/session").json()["id"] for _ in range(3)]
    prompt = text_prompt("TOOL:read hello.txt")
    with ThreadPoolExecutor(8) as pool:
        sent = [
            pool.submit(httpx.post, f"{server.url}/session/{sid}/prompt_async", json=prompt)
            for _ in range(4)
            for sid in sids
            for server in (a, b)
        ]
        assert all(job.result().status_code == 204 for job in sent)
    for sid in sids:
        assert httpx.post(f"{b.url}/api/session/{sid}/wait", timeout=60).status_code == 204
        history = httpx.get(f"{b.url}/session/{sid}/message").json()
        users = [m["info"]["id"] for m in history if m["info"]["role"] == "user"]
        replies = [m for m in history if m["info"]["role"] == "assistant"]
        # Each prompt answered once (a final step with text; the echo model calls the tool in
        # some of them), and every file read happened where the file is.
        answers = [r["info"]["parentID"] for r in replies if any(p["type"] == "text" for p in r["parts"])]
        assert len(users) == 8 and sorted(answers) == sorted(users)
        tools = [p for m in replies for p in m["parts"] if p["type"] == "tool"]
        assert tools and all(ONLY_ON_A in t["state"].get("output", "") for t in tools), [t["state"] for t in tools]


def test_a_revert_or_a_shell_command_landing_where_the_directory_is_missing_is_served_where_it_is(
    machines: tuple[ProcessServer, ProcessServer, Path],
) -> None:
    """Requests that work on the session's files are forwarded to a process that has them: a
    revert through B restores the files on A's machine, a shell command through B runs there."""
    a, b, project = machines
    git_repository(project)
    sid = httpx.post(f"{a.url}/session").json()["id"]
    write = text_prompt('TOOL:write {"filePath": "made.txt", "content": "made by the model\\n"}')
    assert httpx.post(f"{a.url}/session/{sid}/message", json=write, timeout=30).status_code == 200
    assert (project / "made.txt").exists()
    user = next(m for m in httpx.get(f"{a.url}/session/{sid}/message").json() if m["info"]["role"] == "user")
    reverted = httpx.post(f"{b.url}/session/{sid}/revert", json={"messageID": user["info"]["id"]}, timeout=30)
    assert reverted.status_code == 200, reverted.text
    assert not (project / "made.txt").exists()  # restored on A's machine
    assert httpx.post(f"{b.url}/session/{sid}/unrevert", timeout=30).status_code == 200
    assert (project / "made.txt").exists()
    staged = {"messageID": user["info"]["id"], "files": True}  # the V2 revert, staged with its files
    assert httpx.post(f"{b.url}/api/session/{sid}/revert/stage", json=staged, timeout=30).status_code == 200
    assert not (project / "made.txt").exists()
    assert httpx.post(f"{b.url}/api/session/{sid}/revert/clear", timeout=30).status_code == 204
    assert (project / "made.txt").exists()

    shell = httpx.post(f"{b.url}/session/{sid}/shell", json={"agent": "build", "command": "cat hello.txt"}, timeout=30)
    assert shell.status_code == 200, shell.text
    assert ONLY_ON_A in shell.json()["parts"][-1]["state"]["output"]


def test_forwarding_comes_after_the_guards(machines: tuple[ProcessServer, ProcessServer, Path]) -> None:
    """What a browser may send cross-site without a preflight, or with a foreign Host, is refused
    by the process it lands on, before anything is forwarded: the files stay as they are."""
    a, b, project = machines
    git_repository(project)
    sid = httpx.post(f"{a.url}/session").json()["id"]
    write = text_prompt('TOOL:write {"filePath": "kept.txt", "content": "kept\\n"}')
    assert httpx.post(f"{a.url}/session/{sid}/message", json=write, timeout=30).status_code == 200
    user = next(m for m in httpx.get(f"{a.url}/session/{sid}/message").json() if m["info"]["role"] == "user")
    body = json.dumps({"messageID": user["info"]["id"]})
    cross_site = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    refused = httpx.post(f"{b.url}/session/{sid}/revert", content=body, headers=cross_site, timeout=30)
    assert refused.status_code == 403, refused.text
    foreign = httpx.post(f"{b.url}/session/{sid}/revert", content=body, headers={"Host": "evil.example"}, timeout=30)
    assert foreign.status_code in (400, 403, 421), foreign.text
    assert (project / "kept.txt").exists()
    # The same for a request that names the directory: no terminal is started on A.
    in_project = {"directory": str(project)}
    started = json.dumps({"command": "sh", "args": ["-c", "touch started"]})
    refused = httpx.post(f"{b.url}/pty", params=in_project, content=started, headers=cross_site, timeout=30)
    assert refused.status_code == 403, refused.text
    foreign = httpx.post(f"{b.url}/pty", params=in_project, content=started, headers={"Host": "evil.example"})
    assert foreign.status_code in (400, 403, 421), foreign.text
    assert httpx.get(f"{a.url}/pty", params=in_project).json() == []
    assert not (project / "started").exists()


@pytest.mark.parametrize("machines", ["secret"], ids=["password"], indirect=True)
def test_forwarding_asks_for_the_password_where_the_request_lands_and_where_it_goes(
    machines: tuple[ProcessServer, ProcessServer, Path],
) -> None:
    a, b, project = machines
    auth = ("opencode", "secret")
    git_repository(project)
    sid = httpx.post(f"{a.url}/session", auth=auth).json()["id"]
    write = text_prompt('TOOL:write {"filePath": "made.txt", "content": "made\\n"}')
    assert httpx.post(f"{a.url}/session/{sid}/message", json=write, auth=auth, timeout=30).status_code == 200
    messages = httpx.get(f"{a.url}/session/{sid}/message", auth=auth).json()
    revert = {"messageID": next(m["info"]["id"] for m in messages if m["info"]["role"] == "user")}
    for wrong in (None, ("opencode", "wrong")):
        refused = httpx.post(f"{b.url}/session/{sid}/revert", json=revert, auth=wrong, timeout=30)
        assert refused.status_code == 401
    assert (project / "made.txt").exists()
    assert httpx.post(f"{b.url}/session/{sid}/revert", json=revert, auth=auth, timeout=30).status_code == 200
    assert not (project / "made.txt").exists()  # forwarded with the client's credentials, checked on A too


def test_requests_naming_a_directory_only_another_machine_has_are_served_there(
    machines: tuple[ProcessServer, ProcessServer, Path], tmp_path: Path
) -> None:
    """File reads and searches, VCS status, and a new terminal, named for A's project and sent to
    B, are served by A; the terminal is then reached through B like any other. A directory no
    process has is answered where the request lands, as on one process."""
    a, b, project = machines
    git_repository(project)
    config = {"command": {"only-on-a": {"template": "say hello", "description": "a project command"}}}
    (project / "opencode.json").write_text(json.dumps(config))
    in_project = {"directory": str(project)}
    read = httpx.get(f"{b.url}/file/content", params={**in_project, "path": "hello.txt"}, timeout=30)
    assert read.status_code == 200, read.text
    assert ONLY_ON_A in read.json()["content"]
    header = {"x-opencode-directory": quote(str(project))}  # as the SDKs name it
    found = httpx.get(f"{b.url}/find/file", params={"query": "hello"}, headers=header, timeout=30)
    assert found.status_code == 200 and "hello.txt" in found.json(), found.text
    listed = httpx.get(f"{b.url}/api/fs/list", params={"location[directory]": str(project)}, timeout=30)
    assert listed.status_code == 200 and "hello.txt" in [e["path"] for e in listed.json()["data"]], listed.text
    assert httpx.get(f"{b.url}/vcs", params=in_project, timeout=30).json()["branch"]
    assert httpx.get(f"{b.url}/app", params=in_project, timeout=30).json()["git"] is True
    commands = httpx.get(f"{b.url}/command", params=in_project, timeout=30).json()
    assert "only-on-a" in [c["name"] for c in commands]  # from the project's opencode.json
    patched = httpx.patch(f"{b.url}/config", params=in_project, json={"username": "a-user"}, timeout=30)
    assert patched.status_code == 200, patched.text
    assert json.loads((project / "opencode.json").read_text())["username"] == "a-user"  # A's file

    made = httpx.post(f"{b.url}/pty", params=in_project, json={"title": "on A"}, timeout=30)
    assert made.status_code == 200, made.text
    pty = made.json()
    assert pty["cwd"] == str(project)
    assert httpx.get(f"{a.url}/pty/{pty['id']}", params=in_project).status_code == 200  # it lives on A
    assert httpx.get(f"{b.url}/pty/{pty['id']}", params=in_project, timeout=30).json()["title"] == "on A"
    assert httpx.delete(f"{b.url}/pty/{pty['id']}", params=in_project, timeout=30).json() is True

    made_on_a = httpx.post(f"{a.url}/session", params=in_project).json()
    made_through_b = httpx.post(f"{b.url}/session", params=in_project, timeout=30).json()
    assert made_through_b["projectID"] == made_on_a["projectID"] != "global"  # the repository's
    v2 = httpx.post(f"{b.url}/api/session", json={"location": {"directory": str(project)}}, timeout=30)
    assert v2.status_code == 200, v2.text
    assert httpx.get(f"{a.url}/session/{v2.json()['data']['id']}").json()["projectID"] == made_on_a["projectID"]

    nowhere = {"directory": str(tmp_path / "nowhere"), "path": "hello.txt"}
    missing = httpx.get(f"{b.url}/file/content", params=nowhere, timeout=30)
    assert 400 <= missing.status_code < 500, missing.text


def test_a_process_whose_machine_lacks_a_directory_names_its_project_as_where_it_is(
    machines: tuple[ProcessServer, ProcessServer, Path],
) -> None:
    """B lists the project of A's directory, imports a session into it and names it in its
    location as A sees it: the repository's, with its worktree, never ``global``."""
    a, b, project = machines
    git_repository(project)
    in_project = {"directory": str(project)}
    made = httpx.post(f"{a.url}/session", params=in_project).json()
    repository = made["projectID"]
    assert repository != "global"
    listed = httpx.get(f"{b.url}/project", timeout=30).json()
    assert [p["id"] for p in listed if p["worktree"] == str(project)] == [repository], listed
    seen = next(p for p in listed if p["id"] == repository)
    assert seen["vcs"] == "git" and seen["time"]["created"] > 0
    as_current = httpx.get(f"{b.url}/project", params=in_project, timeout=30).json()
    assert as_current[0]["id"] == repository and as_current[0]["worktree"] == str(project)
    location = httpx.get(f"{b.url}/api/location", params=in_project, timeout=30).json()
    assert location["project"]["id"] == repository
    with EventCollector(f"{b.url}/global/event") as on_b:  # frames of A's turn, as B relays them
        assert httpx.post(f"{a.url}/session/{made['id']}/prompt_async", json=text_prompt("hi")).status_code == 204
        idle = on_b.wait_for(lambda f: f.type == "session.idle" and f.properties.get("sessionID") == made["id"])
    assert idle.data["directory"] == str(project) and idle.data["project"] == repository, idle.data

    export = {"info": made | {"id": "ses_0000000000000000000000import"}, "messages": []}
    imported = httpx.post(f"{b.url}/opensession/import", params=in_project, json=export, timeout=30)
    assert imported.status_code == 200, imported.text
    assert imported.json()["projectID"] == repository
