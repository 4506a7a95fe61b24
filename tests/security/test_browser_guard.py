"""The guard against web pages, request by request (tests/security/test_browser_attacks.py sends the same
attacks from a real Chromium): a rebinding ``Host`` is refused for HTTP and WebSocket alike unless
a password is set or the name is allowed; a request a foreign page sent is refused whatever its
method, and a body that is not JSON is refused; the clients OpenCode users run are unaffected."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from app.settings import Settings
from tests.helpers import create_session, git_repository, marking_mcp_project
from tests.servers import ThreadServer, thread_server

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

FOREIGN = "http://evil.example:8000"


def _session_count(client: httpx.Client) -> int:
    return len(client.get("/session").json())


def _ws(server: ThreadServer, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


@pytest.mark.parametrize("host", ["evil.example", "evil.example:4096", "localhost.evil.example", "EVIL.example."])
def test_a_foreign_host_is_refused_without_a_password(client: httpx.Client, host: str) -> None:
    for method, path in (("GET", "/session"), ("POST", "/session"), ("POST", "/pty"), ("GET", "/event")):
        answer = client.request(method, path, headers={"Host": host}, json={})
        assert answer.status_code == 421, (method, path)
        assert answer.json()["name"] == "ForbiddenHost"
    assert _session_count(client) == 0
    assert client.get("/pty").json() == []


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:4096", "127.0.0.1:4096", "[::1]:4096", "127.0.0.2", "10.1.2.3"]
)
def test_local_names_and_addresses_are_served(client: httpx.Client, host: str) -> None:
    assert client.get("/session", headers={"Host": host}).status_code == 200


async def test_a_terminal_socket_for_a_foreign_host_is_refused(server: ThreadServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        pty = (await http.post("/pty", json={"command": "/bin/sh"})).json()
    url = _ws(server, f"/pty/{pty['id']}/connect")
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, additional_headers={"Host": "evil.example"}):
            pass
    assert refused.value.response.status_code == 421
    with pytest.raises(websockets.InvalidStatus) as foreign:
        async with websockets.connect(url, origin=websockets.Origin(FOREIGN)):
            pass
    assert foreign.value.response.status_code == 403
    async with websockets.connect(url, origin=websockets.Origin("http://localhost:3000")) as socket:
        await socket.send("echo hi\n")


@pytest.fixture
def named(settings: Settings) -> Iterator[ThreadServer]:
    with thread_server(settings.model_copy(update={"allowed_hosts": ["box.internal"]})) as handle:
        yield handle


def test_allowed_host_names_are_served(named: ThreadServer) -> None:
    assert httpx.get(f"{named.url}/session", headers={"Host": "box.internal:4096"}).status_code == 200
    assert httpx.get(f"{named.url}/session", headers={"Host": "other.internal"}).status_code == 421


@pytest.fixture
def guarded(settings: Settings) -> Iterator[ThreadServer]:
    with thread_server(settings.model_copy(update={"password": "s3cret"})) as handle:
        yield handle


def test_with_a_password_any_host_is_served(guarded: ThreadServer) -> None:
    answer = httpx.get(
        f"{guarded.url}/session", headers={"Host": "opensession.team.example"}, auth=("opencode", "s3cret")
    )
    assert answer.status_code == 200
    # ...but a foreign page is still refused, even with the browser's cached credentials.
    forged = httpx.post(f"{guarded.url}/session", headers={"Origin": FOREIGN}, json={}, auth=("opencode", "s3cret"))
    assert forged.status_code == 403


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
def test_a_body_that_is_not_json_is_refused(client: httpx.Client, content_type: str | None) -> None:
    export = {"info": {"id": "ses_planted", "title": "planted"}, "messages": []}
    headers = {"content-type": content_type} if content_type else {}
    answer = client.post("/opensession/import", content=json.dumps(export), headers=headers)
    assert answer.status_code == 415
    assert "JSON" in answer.json()["data"]["message"]
    assert client.post("/session", content="{}", headers=headers).status_code == 415
    assert _session_count(client) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": FOREIGN},
        {"Origin": "null"},
        {"Origin": "http://localhost.evil.example:4096"},
        {"Sec-Fetch-Site": "cross-site"},  # a form post from a page that hides its origin
        {"Sec-Fetch-Site": "cross-site", "Referer": f"{FOREIGN}/page.html"},
    ],
)
def test_a_bodiless_post_from_a_foreign_page_is_refused(client: httpx.Client, headers: dict[str, str]) -> None:
    sid = create_session(client)["id"]
    for path in ("/session", f"/session/{sid}/unrevert", f"/session/{sid}/abort", "/pty"):
        answer = client.post(path, headers=headers)
        assert answer.status_code == 403, path
        assert answer.json()["name"] == "ForbiddenOrigin"
    assert client.delete(f"/session/{sid}", headers=headers).status_code == 403
    assert _session_count(client) == 1
    assert client.get("/pty").json() == []


def test_a_foreign_pages_get_starts_nothing(client: httpx.Client, tmp_path: Path) -> None:
    directory, marker = marking_mcp_project(tmp_path)
    image = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    for headers in (image, {**image, "Referer": f"{FOREIGN}/"}, {"Origin": FOREIGN}):
        answer = client.get("/mcp", params={"directory": str(directory)}, headers=headers)
        assert answer.status_code == 403
    assert not marker.exists()
    # The user's own clients still start it.
    assert client.get("/mcp", params={"directory": str(directory)}).status_code == 200
    assert marker.exists()


@pytest.mark.parametrize(
    "origin", ["http://localhost:3000", "http://127.0.0.1:5173", "tauri://localhost", "https://app.opencode.ai"]
)
def test_allowed_origins_and_the_servers_own_pages_keep_working(client: httpx.Client, origin: str) -> None:
    headers = {"Origin": origin, "Sec-Fetch-Site": "cross-site"}
    assert client.post("/session", headers=headers, json={"title": "from the app"}).status_code == 200
    assert client.get("/session", headers={"Sec-Fetch-Site": "same-site", "Referer": f"{origin}/x"}).status_code == 200
    own = str(client.base_url).rstrip("/")
    assert client.post("/session", headers={"Origin": own, "Sec-Fetch-Site": "same-origin"}, json={}).status_code == 200


def test_a_shared_page_opens_from_a_link_anywhere(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    url = client.post(f"/session/{sid}/share").json()["share"]["url"]
    link = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Referer": "https://chat.example/"}
    assert httpx.get(url, headers=link).status_code == 200


def test_a_foreign_page_cannot_run_a_shell_command_or_make_a_worktree(client: httpx.Client, project_dir: Path) -> None:
    """Both start processes in the project: a foreign page gets neither, with a text/plain body,
    a forged JSON one or none; an Idempotency-Key over the limit is a 400 before anything runs."""
    git_repository(project_dir)
    sid = create_session(client)["id"]
    body = json.dumps({"agent": "build", "command": "touch pwned.txt"})
    plain = client.post(f"/session/{sid}/shell", content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    forged = client.post(
        f"/session/{sid}/shell", content=body, headers={"Origin": FOREIGN, "content-type": "application/json"}
    )
    assert forged.status_code == 403
    for headers in ({"Origin": FOREIGN}, {"Sec-Fetch-Site": "cross-site"}):
        assert client.post("/experimental/worktree", headers=headers).status_code == 403
    too_long = {"Idempotency-Key": "k" * 257, "content-type": "application/json"}
    assert client.post(f"/session/{sid}/shell", content=body, headers=too_long).status_code == 400
    assert client.post("/experimental/worktree", headers=too_long).status_code == 400
    assert not (project_dir / "pwned.txt").exists()
    assert client.get("/experimental/worktree").json() == []
    assert client.get(f"/session/{sid}/message").json() == []


def test_a_worktree_removal_needs_a_local_page_the_password_and_a_valid_directory(
    guarded: ThreadServer, project_dir: Path
) -> None:
    """``DELETE /experimental/worktree`` ends what runs in a worktree and deletes it (and may wait
    a minute for another process): a foreign page (even with the browser's cached credentials),
    a request without the password, a relative directory or one with a NUL byte removes
    nothing."""
    git_repository(project_dir)
    with httpx.Client(base_url=guarded.url, auth=("opencode", "s3cret")) as client:
        made = client.post("/experimental/worktree", json={"name": "kept"})
        assert made.status_code == 200, made.text
        tree = made.json()["directory"]
        remove = "/experimental/worktree"
        for headers in ({"Origin": FOREIGN}, {"Sec-Fetch-Site": "cross-site"}):
            assert client.request("DELETE", remove, json={"directory": tree}, headers=headers).status_code == 403
        for directory in ("relative/kept", f"{tree}\x00"):
            refused = client.request("DELETE", remove, json={"directory": directory})
            assert refused.status_code == 400, refused.text
        unauthorized = httpx.request("DELETE", f"{guarded.url}{remove}", json={"directory": tree})
        assert unauthorized.status_code == 401
        assert Path(tree).is_dir() and client.get(remove).json() == [tree]


def test_a_foreign_page_cannot_start_an_init_or_a_compaction(client: httpx.Client) -> None:
    """The other routes that read an Idempotency-Key start a turn (``/session/:id/init``) or a
    summary (V2 compact): a foreign page starts neither, with a text/plain body, a forged JSON
    one or none; a key over the limit is a 400 before anything runs."""
    sid = create_session(client)["id"]
    init = f"/session/{sid}/init"
    body = json.dumps({"providerID": "opensession", "modelID": "echo", "messageID": "msg_1"})
    assert client.post(init, content=body, headers={"content-type": "text/plain"}).status_code == 415
    forged = client.post(init, content=body, headers={"Origin": FOREIGN, "content-type": "application/json"})
    assert forged.status_code == 403
    for headers in ({"Origin": FOREIGN}, {"Sec-Fetch-Site": "cross-site"}):
        assert client.post(f"/api/session/{sid}/compact", headers=headers).status_code == 403
    too_long = {"Idempotency-Key": "k" * 257, "content-type": "application/json"}
    assert client.post(init, content=body, headers=too_long).status_code == 400
    assert client.post(f"/api/session/{sid}/compact", headers=too_long).status_code == 400
    assert client.get(f"/session/{sid}/message").json() == []


def test_the_keyed_routes_need_the_password(guarded: ThreadServer, project_dir: Path) -> None:
    """Shell, worktree create, init and V2 compact answer 401 without the password, and run
    nothing."""
    git_repository(project_dir)
    auth = ("opencode", "s3cret")
    sid = httpx.post(f"{guarded.url}/session", json={}, auth=auth).json()["id"]
    keyed = {"Idempotency-Key": "once"}
    attempts = [
        (f"/session/{sid}/shell", {"agent": "build", "command": "touch pwned.txt"}),
        ("/experimental/worktree", {"name": "pwned"}),
        (f"/session/{sid}/init", {"providerID": "opensession", "modelID": "echo", "messageID": "msg_1"}),
        (f"/api/session/{sid}/compact", None),
    ]
    for path, body in attempts:
        assert httpx.post(f"{guarded.url}{path}", json=body, headers=keyed).status_code == 401, path
    assert not (project_dir / "pwned.txt").exists()
    assert httpx.get(f"{guarded.url}/experimental/worktree", auth=auth).json() == []
    assert httpx.get(f"{guarded.url}/session/{sid}/message", auth=auth).json() == []


def test_a_foreign_page_cannot_init_a_repository_or_change_settings(client: httpx.Client, tmp_path: Path) -> None:
    """The routes the OpenCode app uses for settings: ``git init`` starts a process, the config
    PATCHes write files; a foreign page gets neither, by bodiless POST or by a text/plain body."""
    folder = tmp_path / "folder"
    folder.mkdir()
    scoped = {"directory": str(folder)}
    answer = client.post("/project/git/init", params=scoped, headers={"Origin": FOREIGN})
    assert answer.status_code == 403 and not (folder / ".git").exists()
    for path in ("/config", "/global/config"):
        plain = client.patch(
            path, params=scoped, content='{"username": "evil"}', headers={"content-type": "text/plain"}
        )
        assert plain.status_code == 415, path
        forged = client.patch(path, params=scoped, json={"username": "evil"}, headers={"Origin": FOREIGN})
        assert forged.status_code == 403, path
    assert not (folder / "opencode.json").exists()
    assert "evil" not in json.dumps(client.get("/config", params=scoped).json())


def test_every_route_but_the_shared_pages_and_probes_needs_the_password(guarded: ThreadServer) -> None:
    """Each method of each path the OpenAPI document lists, event streams included, is refused
    without the password (and with a wrong one) before it does anything: a stream answers 401 at
    once instead of opening."""
    from app.api.observability import PROBES

    spec = httpx.get(f"{guarded.url}/doc", auth=("opencode", "s3cret")).json()
    asked = 0
    for template, methods in spec["paths"].items():
        path = re.sub(r"\{[^}]+\}", "x", template)
        for method in methods:
            public = method == "get" and (path in PROBES or path.startswith("/share/"))
            if public or method not in {"get", "post", "put", "patch", "delete"}:
                continue
            for auth in (None, ("opencode", "wrong")):
                answer = httpx.request(method.upper(), f"{guarded.url}{path}", json={}, auth=auth, timeout=5)
                assert answer.status_code == 401, (method, template, answer.text)
                asked += 1
    assert asked > 200  # the document listed the routes
    assert {"/event", "/global/event", "/api/event"} <= set(spec["paths"])


def test_a_foreign_page_cannot_add_an_mcp_server_or_plant_a_provider_key(client: httpx.Client, tmp_path: Path) -> None:
    """``POST /mcp`` starts the command it is given (on every process of a cluster), and a saved
    key is used by every turn: neither by a text/plain body nor with a foreign Origin."""
    marker = tmp_path / "started"
    command = ["sh", "-c", f"touch {marker}"]
    mcp = {"name": "planted", "config": {"type": "local", "command": command}}
    key = {"type": "api", "key": "sk-planted"}
    for method, path, body in (("POST", "/mcp", mcp), ("PUT", "/auth/openai", key)):
        plain = client.request(method, path, content=json.dumps(body), headers={"content-type": "text/plain"})
        assert plain.status_code == 415, path
        forged = client.request(method, path, json=body, headers={"Origin": FOREIGN})
        assert forged.status_code == 403, path
    assert client.get("/mcp").json() == {}
    assert not marker.exists()
    connections = client.get("/api/integration/openai").json()["data"]["connections"]
    assert [c for c in connections if c["type"] == "credential"] == []
