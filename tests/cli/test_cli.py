"""The ``opensession`` client commands (run, sessions, export, import), run as real subprocesses
against a real server (``--attach``) or the one they start in-process on a database of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, git_repository, text_prompt
from tests.servers import ROOT, ThreadServer, free_port, thread_server

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

OPENCODE_EXPORT = Path(__file__).parent.parent / "data" / "opencode_export.json"
ASK_BASH = [{"permission": "bash", "pattern": "*", "action": "ask"}]


def cli(
    *args: str, db: Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m app.cli ARGS`` with its own database and data directories (and ``env``), no
    terminal."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_SERVER_", "OPENSESSION_"))}
    env = inherited | {
        "OPENSESSION_DB": str(db),
        "OPENSESSION_DATA_DIR": str(db.parent / "cli-data"),
        "OPENSESSION_CONFIG_DIR": str(db.parent / "cli-config"),
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("opensession: ")
    return lines[0]


@pytest.fixture
def attach(server: ThreadServer, tmp_path: Path, project_dir: Path) -> Any:
    """Run a command against the test server (its own database path is never used)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(*args, "--attach", server.url, db=tmp_path / "unused.db", cwd=project_dir)

    return run


def sessions_of(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/session", params={"limit": 1000}).json()


# -- run ------------------------------------------------------------------------------------------


def test_run_streams_the_reply_and_exits_zero(attach: Any, client: httpx.Client, project_dir: Path) -> None:
    result = attach("run", "--directory", str(project_dir), "hello", "there")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: hello there\n"
    assert "> build · opensession/echo" in result.stderr
    [session] = sessions_of(client)
    assert session["directory"] == str(project_dir)
    messages = client.get(f"/session/{session['id']}/message").json()
    assert [m["info"]["role"] for m in messages] == ["user", "assistant"]

    again = attach("run", "--directory", str(project_dir), "--continue", "second")
    assert again.returncode == 0, again.stderr
    assert len(sessions_of(client)) == 1
    assert len(client.get(f"/session/{session['id']}/message").json()) == 4


def test_run_shows_tool_calls_and_results(attach: Any, project_dir: Path) -> None:
    result = attach("run", "--directory", str(project_dir), "TOOL:bash echo marker-4711")
    assert result.returncode == 0, result.stderr
    assert "⚙ bash" in result.stderr
    assert "  marker-4711" in result.stderr.splitlines()
    assert result.stdout.startswith("Tool result seen: marker-4711")


def test_agent_and_model_choices(attach: Any, client: httpx.Client, project_dir: Path) -> None:
    chosen = attach("run", "--directory", str(project_dir), "--agent", "plan", "-m", "opensession/echo", "hi")
    assert chosen.returncode == 0, chosen.stderr
    [session] = sessions_of(client)
    user, reply = client.get(f"/session/{session['id']}/message").json()
    assert user["info"]["agent"] == reply["info"]["agent"] == "plan"
    assert user["info"]["model"] == {"providerID": "opensession", "modelID": "echo"}

    for name, why in (("nope", "not found"), ("general", "is a subagent")):
        fallback = attach("run", "--directory", str(project_dir), "--agent", name, "hi")  # a new session
        assert fallback.returncode == 0, fallback.stderr
        assert f'! agent "{name}" {why}' in fallback.stderr
        assert "> build · opensession/echo" in fallback.stderr
    assert "Model not found: nope/x" in one_error_line(attach("run", "-s", session["id"], "-m", "nope/x", "hi"))


def test_a_failing_turn_exits_non_zero(attach: Any, project_dir: Path) -> None:
    result = attach("run", "--directory", str(project_dir), "FAIL:fatal")
    assert result.returncode == 1
    assert "error: Bad Request: echo model asked to fail" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_permission_ask_without_a_terminal_fails_and_yes_approves(
    attach: Any, client: httpx.Client, project_dir: Path
) -> None:
    session = create_session(client, permission=ASK_BASH)
    rejected = attach("run", "--session", session["id"], "TOOL:bash echo approved-run")
    assert rejected.returncode == 1
    assert "permission bash (echo approved-run) rejected: standard input is not a terminal" in rejected.stderr
    assert "--yes" in rejected.stderr
    assert "approved-run" not in rejected.stdout

    approved = attach("run", "--session", session["id"], "--yes", "TOOL:bash echo approved-run")
    assert approved.returncode == 0, approved.stderr
    assert "approved once (--yes)" in approved.stderr
    assert approved.stdout.startswith("Tool result seen: approved-run")


def test_yes_approves_in_the_directory_of_the_session(attach: Any, client: httpx.Client, tmp_path: Path) -> None:
    """Permission requests belong to their session's directory: run answers there, not in the
    server's (or its own) directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    created = client.post("/session", params={"directory": str(elsewhere)}, json={"permission": ASK_BASH})
    approved = attach("run", "--session", created.json()["id"], "--yes", "TOOL:bash echo elsewhere-run")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("Tool result seen: elsewhere-run")


def test_json_format_prints_each_event_of_the_session_as_a_line(attach: Any, project_dir: Path) -> None:
    result = attach("run", "--directory", str(project_dir), "--format", "json", "TOOL:bash echo json-run")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert {"message.updated", "message.part.updated", "message.part.delta", "session.status"} <= set(types)
    assert types[-1] == "session.idle"
    assert len({e["properties"]["sessionID"] for e in events}) == 1
    tools = [e["properties"]["part"] for e in events if e["type"] == "message.part.updated"]
    assert any(p["type"] == "tool" and p["state"]["status"] == "completed" for p in tools)


def test_run_in_process_uses_its_own_database(database_url: str, tmp_path: Path, project_dir: Path) -> None:
    db = tmp_path / "own.db"
    result = cli("run", "in process", db=db, cwd=project_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: in process\n"
    listed = json.loads(cli("sessions", "--json", db=db, cwd=project_dir).stdout)
    assert [(s["directory"], s["messages"]) for s in listed] == [(str(project_dir), 2)]


def test_run_on_a_database_a_server_holds_points_to_attach(server: ThreadServer, project_dir: Path) -> None:
    held = Path(server.settings.database_url.removeprefix("sqlite+aiosqlite:///"))
    line = one_error_line(cli("run", "hello", db=held, cwd=project_dir))
    assert "in use" in line
    assert "--attach" in line


def test_bad_input_is_one_line(attach: Any, tmp_path: Path, project_dir: Path) -> None:
    assert "Session not found" in one_error_line(attach("run", "--session", "ses_missing", "hi"))
    assert "provider/model" in one_error_line(attach("run", "--model", "echo", "hi"))
    assert "no such directory" in one_error_line(
        cli("run", "--directory", str(tmp_path / "none"), "hi", db=tmp_path / "u.db", cwd=project_dir)
    )
    dead = f"http://127.0.0.1:{free_port()}"
    for args in (["run", "hi"], ["sessions"], ["export", "ses_x"], ["import", str(OPENCODE_EXPORT)]):
        line = one_error_line(cli(*args, "--attach", dead, db=tmp_path / "unused.db", cwd=project_dir))
        assert f"cannot reach {dead}" in line


# -- sessions -------------------------------------------------------------------------------------


def test_sessions_table_and_json(attach: Any, client: httpx.Client, project_dir: Path) -> None:
    assert attach("run", "--directory", str(project_dir), "listed prompt").returncode == 0
    [session] = sessions_of(client)
    table = attach("sessions")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["ID", "TITLE", "DIRECTORY", "UPDATED", "MESSAGES", "COST"]
    assert row.startswith(session["id"])
    assert str(project_dir) in row
    assert "\x1b[" not in table.stdout  # not a terminal: plain text

    [listed] = json.loads(attach("sessions", "--json").stdout)
    assert listed["id"] == session["id"]
    assert listed["messages"] == 2
    assert listed["directory"] == str(project_dir)
    assert listed["updated"] == session["time"]["updated"]


def test_sessions_table_on_a_terminal_honours_no_color(server: ThreadServer, tmp_path: Path) -> None:
    """On a terminal the table is drawn by rich; NO_COLOR leaves out colour (not the table)."""
    import pty

    create_session(httpx.Client(base_url=server.url), title="on a tty")
    leader, follower = pty.openpty()
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "sessions", "--attach", server.url],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=30) == 0
    text = output.decode()
    assert "on a tty" in text
    assert "Title" in text  # rich's header, not the plain one
    assert "\x1b[3" not in text  # no colour codes


# -- export and import ----------------------------------------------------------------------------


def exported(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_export_then_import_into_a_fresh_database(attach: Any, client: httpx.Client, tmp_path: Path) -> None:
    session = create_session(client)
    for text in ("first prompt", "TOOL:bash echo exported"):
        assert attach("run", "--session", session["id"], text).returncode == 0
    out = tmp_path / "export.json"
    assert attach("export", session["id"], "--output", str(out)).returncode == 0
    original = json.loads(out.read_text())
    assert original["info"]["id"] == session["id"]
    assert [m["info"]["role"] for m in original["messages"]] == ["user", "assistant", "user", "assistant", "assistant"]

    fresh, elsewhere = tmp_path / "fresh.db", tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = cli("import", str(out), db=fresh, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Imported session: {session['id']}\n"
    copy = exported(cli("export", session["id"], db=fresh, cwd=elsewhere))
    assert copy["messages"] == original["messages"]
    assert copy["info"]["directory"] == str(elsewhere)  # as OpenCode: the importing project owns it
    assert {k: v for k, v in copy["info"].items() if k not in ("directory", "projectID")} == {
        k: v for k, v in original["info"].items() if k not in ("directory", "projectID")
    }

    # The imported session is a working one: it takes a prompt that sees its history.
    follow = cli("run", "--session", session["id"], "after import", db=fresh, cwd=elsewhere)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "Echo: after import\n"

    again = cli("import", str(out), db=fresh, cwd=elsewhere)
    assert "already exists" in one_error_line(again)
    listed = json.loads(cli("sessions", "--json", db=fresh, cwd=elsewhere).stdout)
    assert [(s["id"], s["messages"]) for s in listed] == [(session["id"], 7)]


def test_an_export_over_the_body_limit_imports_back(
    attach: Any, client: httpx.Client, server: ThreadServer, tmp_path: Path
) -> None:
    """What export writes, import reads: a session whose export is over the request body limit
    (a long session's is tens of megabytes) goes back in through ``POST /opensession/import``."""
    session = create_session(client)
    turn = "x" * (server.settings.max_body_bytes // 3)
    for index in range(2):  # each turn stores the prompt and its echo
        assert client.post(f"/session/{session['id']}/message", json=text_prompt(f"{index} {turn}")).status_code == 200
    out = tmp_path / "long.json"
    assert attach("export", session["id"], "--output", str(out)).returncode == 0
    assert out.stat().st_size > server.settings.max_body_bytes
    assert client.delete(f"/session/{session['id']}").status_code == 200
    result = attach("import", str(out))
    assert result.returncode == 0, result.stderr
    assert client.get(f"/session/{session['id']}/message").json() == json.loads(out.read_text())["messages"]


def test_a_real_opencode_export_imports(attach: Any, client: httpx.Client) -> None:
    source = json.loads(OPENCODE_EXPORT.read_text())
    result = attach("import", str(OPENCODE_EXPORT))
    assert result.returncode == 0, result.stderr
    session_id = source["info"]["id"]
    info = client.get(f"/session/{session_id}").json()
    assert info["title"] == source["info"]["title"]
    messages = client.get(f"/session/{session_id}/message").json()
    assert [m["info"] for m in messages] == [m["info"] for m in source["messages"]]
    assert [m["parts"] for m in messages] == [m["parts"] for m in source["messages"]]
    v2 = client.get(f"/api/session/{session_id}/message", params={"order": "asc"}).json()["data"]
    assert [m["id"] for m in v2] == [m["info"]["id"] for m in source["messages"]]  # entered in file order
    assert "already exists" in one_error_line(attach("import", str(OPENCODE_EXPORT)))
    assert len(client.get(f"/session/{session_id}/message").json()) == len(source["messages"])
    # OpenCode's history (its step snapshots, tool states) is one a turn here can continue.
    follow = attach("run", "-s", session_id, "-m", "opensession/echo", "carry on")
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "Echo: carry on\n"


def test_taken_ids_are_remapped_consistently(attach: Any, client: httpx.Client, tmp_path: Path) -> None:
    """The same messages under another session id: every message and part gets a new id, and the
    links between them follow."""
    source = json.loads(OPENCODE_EXPORT.read_text())
    assert attach("import", str(OPENCODE_EXPORT)).returncode == 0
    source["info"]["id"] = "ses_0000000000000000000000other"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(source))
    assert attach("import", str(other)).returncode == 0
    messages = client.get("/session/ses_0000000000000000000000other/message").json()
    old_ids = {m["info"]["id"] for m in source["messages"]}
    new_ids = [m["info"]["id"] for m in messages]
    assert len(new_ids) == len(source["messages"])
    assert not old_ids & set(new_ids)
    by_old = dict(zip([m["info"]["id"] for m in source["messages"]], new_ids, strict=True))
    old_parts = {p["id"] for m in source["messages"] for p in m["parts"]}
    for original, copy in zip(source["messages"], messages, strict=True):
        assert copy["info"]["sessionID"] == "ses_0000000000000000000000other"
        if "parentID" in original["info"]:
            assert copy["info"]["parentID"] == by_old[original["info"]["parentID"]]
        assert [p["type"] for p in copy["parts"]] == [p["type"] for p in original["parts"]]
        for part in copy["parts"]:
            assert part["id"] not in old_parts
            assert part["messageID"] == copy["info"]["id"]
            assert part["sessionID"] == "ses_0000000000000000000000other"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not JSON"),
        ('{"info": {"id": "ses_ok", "title": "t", "time": {"created": 1, "updated": 1}}}', "messages: Field required"),
        ("BAD_ROLE", "messages.2.info.role"),
    ],
)
def test_a_malformed_file_writes_nothing(
    attach: Any, client: httpx.Client, tmp_path: Path, content: str, expected: str
) -> None:
    if content == "BAD_ROLE":  # valid up to its third message
        data = json.loads(OPENCODE_EXPORT.read_text())
        data["messages"][2]["info"]["role"] = "robot"
        content = json.dumps(data)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert expected in one_error_line(attach("import", str(bad)))
    assert sessions_of(client) == []
    assert "cannot read" in one_error_line(attach("import", str(tmp_path / "missing.json")))


def test_a_server_that_is_not_opensession_is_one_line(database_url: str, tmp_path: Path, project_dir: Path) -> None:
    """OpenCode answers routes it does not have with its web app (HTML, 200)."""

    class WebApp(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><html></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    web = ThreadingHTTPServer(("127.0.0.1", 0), WebApp)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}"
        line = one_error_line(cli("sessions", "--attach", url, db=tmp_path / "u.db", cwd=project_dir))
        assert "has no /opensession/sessions (not an opensession server?)" in line
    finally:
        web.shutdown()


def test_the_import_route_refuses_what_is_not_an_export(client: httpx.Client) -> None:
    json_body = {"content-type": "application/json"}
    assert client.post("/opensession/import", content=b"[1, 2]", headers=json_body).status_code == 400
    assert client.post("/opensession/import", content=b"{", headers=json_body).status_code == 400
    assert sessions_of(client) == []


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # in every git repository


def test_an_imported_file_cannot_undo_files_or_stay_the_latest(client: httpx.Client, project_dir: Path) -> None:
    """A file names a pending revert whose tree is git's empty one (unreverting to it would
    delete the project's files) and a time far ahead (it would stay the session ``run -c``
    continues). Neither survives the import."""
    (project_dir / "kept.txt").write_text("the user's work\n")
    git_repository(project_dir)
    source = json.loads(OPENCODE_EXPORT.read_text())
    first_user = source["messages"][0]["info"]["id"]
    source["info"]["revert"] = {"messageID": first_user, "snapshot": EMPTY_TREE, "diff": ""}
    reply = source["messages"][1]
    patch = {"id": "prt_000000000000000000000patch", "type": "patch", "hash": EMPTY_TREE}
    reply["parts"].append(patch | {"files": [str(project_dir / "kept.txt")], "messageID": reply["info"]["id"]})
    source["info"]["time"] = {"created": 1, "updated": 99_999_999_999_999}
    imported = client.post("/opensession/import", json=source)
    assert imported.status_code == 200, imported.text
    info = imported.json()
    assert info["revert"] == {"messageID": first_user}
    assert info["time"]["created"] == 1 and info["time"]["updated"] <= time.time() * 1000
    assert client.post(f"/session/{info['id']}/unrevert").status_code == 200
    assert (project_dir / "kept.txt").read_text() == "the user's work\n"
    newer = create_session(client)
    assert client.get("/session").json()[0]["id"] == newer["id"]


def test_the_local_server_uses_the_password_from_the_environment(
    database_url: str, tmp_path: Path, project_dir: Path
) -> None:
    """OPENCODE_SERVER_PASSWORD protects the in-process server too; the client sends it."""
    password = {"OPENCODE_SERVER_PASSWORD": "pw"}
    result = cli("run", "secret hello", db=tmp_path / "secret.db", cwd=project_dir, env=password)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: secret hello\n"


def test_a_permission_ask_on_a_terminal_takes_the_answer(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    """With a terminal on standard input the ask is put there; "a" (always) lets the call run and
    saves the rule, so the next call is not asked."""
    import pty

    session = create_session(client, permission=ASK_BASH)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "--attach", server.url, "-s", session["id"], "TOOL:bash echo tty"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    os.close(follower)
    assert proc.stderr is not None and proc.stdout is not None
    seen = b""
    while b"[r]eject? " not in seen:
        chunk = os.read(proc.stderr.fileno(), 1024)
        assert chunk, seen
        seen += chunk
    assert b"! permission bash (echo tty): allow [o]nce, [a]lways or [r]eject? " in seen
    os.write(leader, b"a\n")
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert proc.stdout.read().decode().startswith("Tool result seen: tty")
    os.close(leader)
    again = cli(
        "run",
        "--attach",
        server.url,
        "-s",
        session["id"],
        "TOOL:bash echo again",
        db=project_dir / "x.db",
        cwd=project_dir,
    )
    assert again.returncode == 0, again.stderr  # no terminal now, and no ask: "always" was saved
    assert "permission" not in again.stderr


def test_attach_sends_the_password_from_the_environment(settings: Settings, tmp_path: Path, project_dir: Path) -> None:
    with thread_server(settings.model_copy(update={"password": "pw"})) as locked:
        refused = cli("sessions", "--attach", locked.url, db=tmp_path / "u.db", cwd=project_dir)
        assert "refused the credentials: set OPENCODE_SERVER_PASSWORD" in one_error_line(refused)
        password = {"OPENCODE_SERVER_PASSWORD": "pw"}
        result = cli("sessions", "--json", "--attach", locked.url, db=tmp_path / "u.db", cwd=project_dir, env=password)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == []


def test_ctrl_c_aborts_the_turn(server: ThreadServer, client: httpx.Client, project_dir: Path) -> None:
    import signal

    session = create_session(client)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "--attach", server.url, "-s", session["id"], "SLOW:0.5 long reply"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert os.read(proc.stdout.fileno(), 100)  # the first delta has arrived: the turn is running
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert proc.stderr is not None and "aborted" in proc.stderr.read().decode()
    reply = client.get(f"/session/{session['id']}/message").json()[-1]["info"]
    assert reply["error"]["name"] == "MessageAbortedError"
    assert client.get("/session/status").json() == {}
