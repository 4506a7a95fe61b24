"""``GET /`` in a real headless Chromium, and the OpenCode web app's home screen requests made
from a page of an allowed origin (as the app served by ``opencode web`` makes them once this
server is added under Settings → Servers).

The page lists this server's sessions, most recently updated first, and says how to connect the
app and the TUI; a hostile title or directory is shown as text (no element, no script run), the
page runs no script of its own (its CSP allows none), it is behind the password when one is set,
a foreign page cannot load it, and loading it starts nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.settings import Settings
from tests.browser import chromium
from tests.helpers import create_session, git_repository, marking_mcp_project
from tests.servers import ThreadServer, thread_server

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True), pytest.mark.slow]

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
APP_ORIGIN = "http://localhost:8125"  # an allowed origin (any loopback port), as the app's page has


# Chromium's Local Network Access checks would stop the app page's requests to 127.0.0.1 in
# the browser itself (the app as ``opencode web`` serves it is on loopback too, where they pass).
NO_LOCAL_NETWORK_CHECKS = (
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(NO_LOCAL_NETWORK_CHECKS) as launched:
        yield launched


def _load(browser: Any, url: str, **context: Any) -> tuple[Any, Any, list[str]]:
    """The page at ``url`` in a fresh context, and what it tried: dialogs and console errors."""
    opened = browser.new_context(**context)
    page = opened.new_page()
    noticed: list[str] = []
    page.on("dialog", lambda dialog: (noticed.append(f"dialog {dialog.message}"), dialog.dismiss()))  # type: ignore[func-returns-value]
    page.on("console", lambda message: noticed.append(f"console {message.text}"))
    response = page.goto(url)
    return opened, response, noticed


def test_the_page_lists_sessions_newest_first_and_escapes_them(
    server: ThreadServer, client: httpx.Client, browser: Any, tmp_path: Path
) -> None:
    directory, marker = marking_mcp_project(tmp_path)
    plain = create_session(client, title="first, plain")
    hostile = client.post("/session", params={"directory": f"/srv/{HOSTILE}"}, json={"title": HOSTILE}).json()
    last = client.post("/session", params={"directory": str(directory)}, json={"title": "latest"}).json()
    opened, response, noticed = _load(browser, server.url + "/")
    try:
        assert response.status == 200 and response.headers["content-type"].startswith("text/html")
        assert "script-src" not in response.headers["content-security-policy"]  # default-src 'none': no script
        page = opened.pages[0]
        rows = page.locator("#sessions tbody tr")
        assert rows.count() == 3
        assert [rows.nth(i).locator(".id").inner_text() for i in range(3)] == [last["id"], hostile["id"], plain["id"]]
        assert rows.nth(1).locator(".title").inner_text().startswith(HOSTILE)  # the markup, as text
        assert rows.nth(1).locator(".directory").inner_text() == f"/srv/{HOSTILE}"
        assert page.locator("#sessions img, #sessions script").count() == 0
        assert page.evaluate("window.pwned") is None
        connect = page.locator("#connect").inner_text()
        assert "Settings → Servers" in connect and f"opencode attach {server.url}" in connect
        assert noticed == []
    finally:
        opened.close()
    assert not marker.exists()  # listing a session of an MCP project started nothing


def test_the_page_needs_the_password_and_no_foreign_page_loads_it(settings: Settings, browser: Any) -> None:
    settings.password = "hunter2"
    with thread_server(settings) as server:
        auth = ("opencode", "hunter2")
        httpx.post(f"{server.url}/session", json={"title": "behind a password"}, auth=auth)
        refused = httpx.get(f"{server.url}/")
        assert refused.status_code == 401 and "behind a password" not in refused.text
        assert refused.headers["www-authenticate"].startswith("Basic")  # a browser asks for it
        opened, response, _ = _load(
            browser, server.url + "/", http_credentials={"username": "opencode", "password": "hunter2"}
        )
        try:
            assert response.status == 200
            assert opened.pages[0].locator("#sessions .title").inner_text().startswith("behind a password")
            assert "this server's password" in opened.pages[0].locator("#connect").inner_text()
        finally:
            opened.close()
        foreign = httpx.get(
            f"{server.url}/",
            auth=auth,
            headers={"sec-fetch-site": "cross-site", "referer": "https://evil.example/page"},
        )
        assert foreign.status_code == 403 and foreign.json()["name"] == "ForbiddenOrigin"


def test_an_empty_server_says_so(client: httpx.Client) -> None:
    response = client.get("/")
    assert response.status_code == 200 and "No sessions yet." in response.text
    assert client.head("/").status_code == 200


def test_the_web_apps_home_screen_requests_through_chromium(
    server: ThreadServer, client: httpx.Client, browser: Any, project_dir: Path
) -> None:
    """What the app asks for when it opens this server: health, its session index (limit 5000),
    the projects it then colours (PATCH, retried on every load until it is kept), settings."""
    git_repository(project_dir)
    sessions = [create_session(client, title=f"session {n}")["id"] for n in range(3)]
    project = client.get("/project/current").json()
    base = json.dumps(server.url)
    colour = json.dumps(f"/project/{project['id']}?directory={quote(str(project_dir))}")
    script = f"""
    window.done = (async () => {{
      const base = {base};
      const json = {{"content-type": "application/json"}};
      const seen = {{}};
      const patch = (body) => ({{method: "PATCH", headers: json, body: JSON.stringify(body)}});
      const ask = async (name, path, init) => {{
        const response = await fetch(base + path, init);
        seen[name] = {{status: response.status, body: await response.json()}};
      }};
      await ask("health", "/global/health");
      await ask("index", "/api/session?limit=5000&order=desc");
      await ask("projects", "/project");
      await ask("colour", {colour}, patch({{icon: {{color: "pink"}}}}));
      await ask("again", "/project");
      await ask("global", "/global/config");
      await ask("settings", "/global/config", patch({{username: "app"}}));
      await ask("paths", "/path");
      await ask("status", "/session/status");
      await ask("legacy", "/session?limit=5000");
      return seen;
    }})();
    """
    page = browser.new_page()
    html = f"<!doctype html><html><body><script>{script}</script></body></html>"
    page.route(APP_ORIGIN + "/", lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    try:
        page.goto(APP_ORIGIN + "/")
        seen = page.evaluate("window.done")
    finally:
        page.close()
    assert {name: answer["status"] for name, answer in seen.items()} == {name: 200 for name in seen}
    assert [s["id"] for s in seen["index"]["body"]["data"]] == sessions[::-1]
    assert seen["index"]["body"]["cursor"] == {}
    assert [s["id"] for s in seen["legacy"]["body"]] == sessions[::-1]
    assert seen["colour"]["body"]["icon"] == {"color": "pink"}
    assert seen["again"]["body"][0]["icon"] == {"color": "pink"}  # kept: the app stops asking
    assert seen["settings"]["body"]["username"] == "app"
    assert client.get("/global/config").json()["username"] == "app"
