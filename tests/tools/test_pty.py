"""Terminals (``/pty``, ``/api/pty``) on a real server with a real WebSocket client: input and
output, resize, replay by cursor, the scrollback bound, removal and exit of whole sessions,
confinement of ``cwd``, error shapes and the V2 answers. Every wait is bounded."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from app.settings import Settings
from tests.helpers import running, wait_until
from tests.servers import ThreadServer, free_port, thread_server
from tests.sse import EventCollector

BUFFER_LIMIT = 64 * 1024
BASH = {"command": "bash", "args": ["--norc", "--noprofile"], "env": {"PS1": "$ "}}


def settings_for(tmp_path: Path, project_dir: Path, config_dir: Path, **more: Any) -> Settings:
    """Terminals do not touch the database: one engine (SQLite) is enough."""
    db = f"sqlite+aiosqlite:///{tmp_path / 'opensession.db'}"
    return Settings(db=db, directory=str(project_dir), config_dir=str(config_dir), port=free_port(), **more)


@pytest.fixture
def pty_server(tmp_path: Path, project_dir: Path, config_dir: Path) -> Iterator[ThreadServer]:
    settings = settings_for(tmp_path, project_dir, config_dir, pty_buffer_chars=BUFFER_LIMIT)
    with thread_server(settings) as handle:
        yield handle


@pytest.fixture
def http(pty_server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=pty_server.url, timeout=10.0) as client:
        yield client


def ws_url(server: ThreadServer, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


def create(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/pty", json=body)
    assert response.status_code == 200, response.text
    return response.json()


class Reader:
    """Frames of one connection: text is output, a ``0x00`` binary frame carries the cursor."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.text = ""
        self.cursor: int | None = None
        self.live = ""  # the text after the control frame

    @property
    def position(self) -> int:
        """The cursor a client computes: the control frame's, plus what it received since."""
        assert self.cursor is not None
        return self.cursor + len(self.live)

    async def _take(self) -> None:
        frame = await self.socket.recv()
        if isinstance(frame, bytes):
            assert frame[:1] == b"\x00"
            self.cursor = json.loads(frame[1:])["cursor"]
        else:
            self.text += frame
            if self.cursor is not None:
                self.live += frame

    async def until(self, predicate: Callable[[Reader], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate(self):
                await self._take()

    async def contains(self, needle: str, timeout: float = 5.0) -> None:
        await self.until(lambda r: needle in r.text, timeout)

    async def replayed(self) -> str:
        """What came before the control frame."""
        await self.until(lambda r: r.cursor is not None)
        return self.text

    async def closed(self, timeout: float = 5.0) -> int:
        async with asyncio.timeout(timeout):
            try:
                while True:
                    await self._take()
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd is not None
                return closed.rcvd.code


async def test_input_reaches_the_shell_and_output_comes_back(pty_server: ThreadServer, http: httpx.Client) -> None:
    info = create(http, **BASH)
    assert info["status"] == "running" and info["args"] == ["--norc", "--noprofile", "-l"]
    assert info["cwd"] == pty_server.settings.directory and info["title"] == f"Terminal {info['id'][-4:]}"
    async with websockets.connect(ws_url(pty_server, f"/pty/{info['id']}/connect")) as socket:
        reader = Reader(socket)
        await reader.replayed()
        await socket.send("echo hello-$((40+2))\n")
        await reader.contains("hello-42")
        await socket.send(b"echo bytes-$((1+1))\n")
        await reader.contains("bytes-2")
    http.delete(f"/pty/{info['id']}")


async def test_resize_reaches_the_terminal(pty_server: ThreadServer, http: httpx.Client) -> None:
    info = create(http, **BASH, title="sized")
    updated = http.put(f"/pty/{info['id']}", json={"size": {"rows": 31, "cols": 97}, "title": "renamed"})
    assert updated.status_code == 200 and updated.json()["title"] == "renamed"
    async with websockets.connect(ws_url(pty_server, f"/pty/{info['id']}/connect")) as socket:
        reader = Reader(socket)
        await socket.send("stty size\n")
        await reader.contains("31 97")
    assert http.put(f"/pty/{info['id']}", json={"size": {"rows": 0, "cols": 5}}).status_code == 400
    http.delete(f"/pty/{info['id']}")


async def test_output_while_disconnected_is_replayed_from_the_cursor(
    pty_server: ThreadServer, http: httpx.Client
) -> None:
    info = create(http, **BASH)
    url = ws_url(pty_server, f"/pty/{info['id']}/connect")
    async with websockets.connect(url) as socket:
        first = Reader(socket)
        await socket.send("echo seen-$((2+2))\n")
        await first.contains("seen-4")
        await socket.send("(sleep 0.3; echo missed-$((3+3))) &\n")
        await first.contains("\n")
        seen = first.position
    time.sleep(0.6)  # the background job writes while nobody is connected
    async with websockets.connect(f"{url}?cursor={seen}") as socket:
        resumed = await Reader(socket).replayed()
    assert "missed-6" in resumed and "seen-4" not in resumed
    async with websockets.connect(url) as socket:  # no cursor: everything still held
        everything = Reader(socket)
        assert "seen-4" in await everything.replayed() and "missed-6" in everything.text
    async with websockets.connect(f"{url}?cursor=-1") as socket:  # live only
        live = Reader(socket)
        assert await live.replayed() == "" and live.cursor == everything.cursor
    http.delete(f"/pty/{info['id']}")


async def test_every_connection_receives_the_output(pty_server: ThreadServer, http: httpx.Client) -> None:
    info = create(http, **BASH)
    url = ws_url(pty_server, f"/pty/{info['id']}/connect?cursor=-1")
    async with websockets.connect(url) as one, websockets.connect(url) as two:
        readers = [Reader(one), Reader(two)]
        for reader in readers:
            await reader.replayed()
        await one.send("echo both-$((5*5))\n")
        for reader in readers:
            await reader.contains("both-25")
    http.delete(f"/pty/{info['id']}")


async def test_the_scrollback_is_bounded(pty_server: ThreadServer, http: httpx.Client) -> None:
    script = "head -c 300000 /dev/zero | tr '\\0' x; echo; echo END-MARK; sleep 100"
    info = create(http, command="sh", args=["-c", script])
    url = ws_url(pty_server, f"/pty/{info['id']}/connect")
    deadline = time.monotonic() + 10
    while True:
        # max_queue=None: output still arriving must not fill the client's queue, or the close
        # handshake waits for a reader that stopped reading (websockets' close_timeout, 10 s)
        async with websockets.connect(url, max_queue=None) as socket:
            reader = Reader(socket)
            replay = await reader.replayed()
        if replay.endswith("END-MARK\r\n") or time.monotonic() > deadline:  # the tty may split a write
            break
        await asyncio.sleep(0.05)
    assert replay.endswith("END-MARK\r\n")
    assert len(replay) == BUFFER_LIMIT and reader.cursor is not None and reader.cursor > 300000
    assert http.delete(f"/pty/{info['id']}").json() is True


async def test_delete_ends_the_whole_session_and_closes_the_socket(
    pty_server: ThreadServer, http: httpx.Client
) -> None:
    info = create(http, **BASH)
    events = EventCollector(f"{pty_server.url}/event")
    async with websockets.connect(ws_url(pty_server, f"/pty/{info['id']}/connect")) as socket:
        reader = Reader(socket)
        await socket.send("sleep 1000 & echo job=$!; sleep 1001 & echo job=$!\n")
        await reader.until(lambda r: len(re.findall(r"job=(\d+)", r.text)) == 2)
        jobs = [int(pid) for pid in re.findall(r"job=(\d+)", reader.text)]
        assert all(running(pid) for pid in [info["pid"], *jobs])
        response = http.delete(f"/pty/{info['id']}")
        assert response.status_code == 200 and response.json() is True
        assert await reader.closed() == 1000
    assert not any(running(pid) for pid in [info["pid"], *jobs])
    events.wait_for(lambda f: f.type == "pty.deleted" and f.properties == {"id": info["id"]})
    assert http.get(f"/pty/{info['id']}").status_code == 404
    assert http.get("/pty").json() == []


async def test_exit_is_reported(pty_server: ThreadServer, http: httpx.Client) -> None:
    events = EventCollector(f"{pty_server.url}/event")
    legacy = create(http, command="sh", args=["-c", "sleep 0.2; echo bye; exit 3"])
    async with websockets.connect(ws_url(pty_server, f"/pty/{legacy['id']}/connect")) as socket:
        reader = Reader(socket)
        assert await reader.closed() == 1000  # after the last output
        assert "bye" in reader.text
    exited = events.wait_for(lambda f: f.type == "pty.exited")
    assert exited.properties == {"id": legacy["id"], "exitCode": 3}
    # A legacy terminal is gone once it exits (OpenCode 1.18.33); a V2 one is kept, with its code.
    wait_until(lambda: http.get(f"/pty/{legacy['id']}").status_code == 404)
    v2 = http.post("/api/pty", json={"command": "sh", "args": ["-c", "exit 4"]}).json()["data"]
    events.wait_for(lambda f: f.type == "pty.exited" and f.properties["id"] == v2["id"])
    kept = http.get(f"/api/pty/{v2['id']}").json()["data"]
    assert kept["status"] == "exited" and kept["exitCode"] == 4
    assert [p["id"] for p in http.get("/pty").json()] == [v2["id"]]
    assert http.delete(f"/api/pty/{v2['id']}").status_code == 204


async def test_a_terminal_whose_keeper_is_killed_ends_as_hung_up(pty_server: ThreadServer, http: httpx.Client) -> None:
    """The keeper holds the pty: killed (``kill -9``, an OOM killer), it takes the pty with it,
    and the terminal ends as a hung-up program does (exit code 129), its socket closed."""
    events = EventCollector(f"{pty_server.url}/event")
    info = http.post("/api/pty", json=BASH).json()["data"]
    keeper = int(Path(f"/proc/{info['pid']}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    assert "keeper.py" in Path(f"/proc/{keeper}/cmdline").read_text()
    async with websockets.connect(ws_url(pty_server, f"/pty/{info['id']}/connect")) as socket:
        reader = Reader(socket)
        await reader.replayed()
        os.kill(keeper, signal.SIGKILL)
        assert await reader.closed() == 1000
    exited = events.wait_for(lambda f: f.type == "pty.exited" and f.properties["id"] == info["id"])
    assert exited.properties["exitCode"] == 129
    assert http.get(f"/api/pty/{info['id']}").json()["data"]["status"] == "exited"
    wait_until(lambda: not running(info["pid"]))
    assert http.delete(f"/api/pty/{info['id']}").status_code == 204


def test_terminals_are_refused_where_their_sockets_would_not_be_private(
    project_dir: Path, config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper's socket hands over the whole terminal: it lives in a directory only this user
    may enter. One another user could enter (made beforehand by someone else, or too open) is
    refused, with a 400 that says why, and no program is started."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"opensession-{os.getuid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    settings = settings_for(tmp_path, project_dir, config_dir)
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=10.0) as http:
        refused = http.post("/pty", json={"command": "sh", "args": ["-c", "touch started"]})
        assert refused.status_code == 400, refused.text
        assert "not a directory private to this user" in refused.text
        assert http.get("/pty").json() == []
    assert not (project_dir / "started").exists()


def test_cwd_stays_inside_the_project(pty_server: ThreadServer, http: httpx.Client, tmp_path: Path) -> None:
    project = Path(pty_server.settings.directory)
    (project / "sub").mkdir()
    (project / "out").symlink_to(tmp_path)
    inside = create(http, command="sh", args=["-c", "sleep 100"], cwd="sub")
    assert inside["cwd"] == str(project / "sub")
    for cwd in ("..", "/etc", "out", "sub/../../"):
        refused = http.post("/pty", json={"command": "sh", "cwd": cwd})
        assert refused.status_code == 403, (cwd, refused.text)
        assert refused.json()["_tag"] == "PtyForbiddenError" and cwd in refused.json()["message"]
    assert http.post("/api/pty", json={"cwd": "/etc"}).json()["_tag"] == "ForbiddenError"
    missing = http.post("/pty", json={"cwd": "nowhere"})
    assert missing.status_code == 400 and "nowhere" in missing.json()["data"]["message"]
    assert http.post("/pty", json={"command": "/no/such/program"}).status_code == 400
    assert http.get("/pty").json() == [inside]
    http.delete(f"/pty/{inside['id']}")


def test_a_cwd_or_directory_the_system_refuses_is_a_400(pty_server: ThreadServer, http: httpx.Client) -> None:
    """A name over 255 bytes or a symlink loop, as ``cwd`` or as the directory: a 400 naming the
    problem, and no terminal (they were 500s)."""
    project = Path(pty_server.settings.directory)
    (project / "loop").symlink_to("loop")
    for cwd in ("a" * 300, "loop", "loop/x", "d" * 256 + "/x"):
        for path, params in (("/pty", {}), ("/api/pty", {}), ("/pty", {"directory": str(project / cwd)})):
            body = {} if params else {"cwd": cwd}
            refused = http.post(path, params=params, json={"command": "sh", **body})
            assert refused.status_code == 400, (path, cwd, refused.text)
            error = refused.json()
            assert "Unexpected" not in (error.get("message") or error["data"]["message"])
    assert http.get("/pty").json() == []


async def test_unknown_ids_and_bad_bodies(pty_server: ThreadServer, http: httpx.Client) -> None:
    missing = {"_tag": "PtyNotFoundError", "ptyID": "pty_nope", "message": "PTY session not found: pty_nope"}
    for method in ("GET", "PUT", "DELETE"):
        response = http.request(method, "/pty/pty_nope", json={})
        assert response.status_code == 404 and response.json() == missing
    assert http.get("/api/pty/pty_nope").json() == missing
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(ws_url(pty_server, "/pty/pty_nope/connect")):
            pass
    assert refused.value.response.status_code == 404
    assert http.get("/pty/nope").status_code == 400
    bad = http.post("/pty", json={"command": 5})
    assert bad.status_code == 400 and "command" in bad.json()["data"]["message"]
    assert http.post("/api/pty", json={"shell": "zsh"}).json()["_tag"] == "InvalidRequestError"
    info = create(http, command="cat")
    assert http.get(f"/pty/{info['id']}/connect").status_code == 400  # not an upgrade
    http.delete(f"/pty/{info['id']}")


async def test_v2_answers_and_connect_tickets(pty_server: ThreadServer, http: httpx.Client) -> None:
    directory = pty_server.settings.directory
    created = http.post("/api/pty", json={"command": "cat", "title": "v2"}).json()
    assert created["location"]["directory"] == directory and created["location"]["project"]["directory"] == directory
    pty_id = created["data"]["id"]
    assert http.get("/api/pty").json()["data"] == [created["data"]]
    assert http.get(f"/api/pty/{pty_id}").json()["data"] == created["data"]
    assert http.put(f"/api/pty/{pty_id}", json={"title": "t"}).json()["data"]["title"] == "t"
    assert http.post(f"/api/pty/{pty_id}/connect-token").json()["_tag"] == "ForbiddenError"
    assert http.post(f"/pty/{pty_id}/connect-token").json()["_tag"] == "PtyForbiddenError"
    foreign = {"x-opencode-ticket": "1", "origin": "http://evil.example"}
    assert http.post(f"/pty/{pty_id}/connect-token", headers=foreign).status_code == 403
    granted = http.post(f"/api/pty/{pty_id}/connect-token", headers={"x-opencode-ticket": "1"}).json()["data"]
    assert granted["expires_in"] == 60
    url = ws_url(pty_server, f"/api/pty/{pty_id}/connect?ticket={granted['ticket']}")
    async with websockets.connect(url) as socket:
        reader = Reader(socket)
        await socket.send("typed-in\n")
        await reader.contains("typed-in")
    with pytest.raises(websockets.InvalidStatus) as spent:
        async with websockets.connect(url):
            pass
    assert spent.value.response.status_code == 403
    other = http.get("/api/pty", params={"directory": str(Path(directory).parent)}).json()
    assert other["data"] == []
    by_location = http.get("/api/pty", params={"location[directory]": str(Path(directory).parent)}).json()
    assert by_location["data"] == [] and by_location["location"]["directory"] == str(Path(directory).parent)
    assert http.delete(f"/api/pty/{pty_id}").status_code == 204
    assert http.delete(f"/api/pty/{pty_id}").status_code == 404


def test_shells(http: httpx.Client) -> None:
    shells = http.get("/pty/shells").json()
    assert shells and all(set(s) == {"path", "name", "acceptable"} for s in shells)


@pytest.mark.parametrize("orphan_seconds", [0.0, 1.0])
def test_a_terminal_ends_once_no_server_took_it_up_in_time(
    project_dir: Path, config_dir: Path, tmp_path: Path, orphan_seconds: float
) -> None:
    """Its server stopped and no other took it up: the terminal's whole session ends once
    ``pty_orphan_seconds`` have passed (with 0, as the server stops)."""
    settings = settings_for(tmp_path, project_dir, config_dir, pty_orphan_seconds=orphan_seconds)
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=10.0) as http:
        info = create(http, command="sh", args=["-c", "sleep 1000 & echo $! > child; wait"])
        child = project_dir / "child"
        wait_until(lambda: child.exists() and child.read_text().strip() != "")
        pids = [info["pid"], int(child.read_text())]
        assert all(running(pid) for pid in pids)
    if orphan_seconds:
        assert all(running(pid) for pid in pids)  # waiting for a server to take it up
    wait_until(lambda: not any(running(pid) for pid in pids), timeout=orphan_seconds + 3.0)


async def test_a_password_guards_the_socket_too(project_dir: Path, config_dir: Path, tmp_path: Path) -> None:
    # The password field is read under its environment names only.
    settings = settings_for(tmp_path, project_dir, config_dir, OPENSESSION_PASSWORD="secret")
    auth = httpx.BasicAuth("opencode", "secret")
    with thread_server(settings) as server, httpx.Client(base_url=server.url, auth=auth, timeout=10.0) as http:
        pty_id = create(http, command="cat")["id"]
        url = ws_url(server, f"/pty/{pty_id}/connect")
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(url):
                pass
        assert refused.value.response.status_code == 401
        header = {"Authorization": "Basic " + base64.b64encode(b"opencode:secret").decode()}
        async with websockets.connect(url, additional_headers=header) as socket:
            await Reader(socket).replayed()
        ticket = http.post(f"/pty/{pty_id}/connect-token", headers={"x-opencode-ticket": "1"}).json()["ticket"]
        async with websockets.connect(f"{url}?ticket={ticket}") as socket:
            await Reader(socket).replayed()
        with pytest.raises(websockets.InvalidStatus) as forged:
            async with websockets.connect(f"{url}?ticket=forged"):
                pass
        assert forged.value.response.status_code == 403
