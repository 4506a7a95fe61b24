"""CORS as OpenCode's server answers it: loopback origins on any port, the desktop app's
origins, opencode.ai's web apps and configured extra origins are allowed; a preflight is answered
before basic auth, while the real request still needs the password."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.servers import ThreadServer, free_port, thread_server, wait_healthy

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

ALLOWED = [
    "http://localhost:3000",
    "http://127.0.0.1:5173",
    "tauri://localhost",
    "http://tauri.localhost",
    "https://tauri.localhost",
    "oc://renderer",
    "https://opencode.ai",
    "https://app.opencode.ai",
    "https://extra.example",  # configured below
]
REFUSED = ["https://evil.example", "http://localhost.evil.example", "https://opencode.ai.evil.example", "null"]


def _preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(
        f"{url}/session",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,authorization",
        },
    )


@pytest.fixture
def guarded(settings: Settings) -> Iterator[ThreadServer]:
    update = {"password": "s3cret", "cors": ["https://extra.example"]}
    with thread_server(settings.model_copy(update=update)) as handle:
        yield handle


@SQLITE
@pytest.mark.parametrize("origin", ALLOWED)
def test_allowed_origins_pass_preflight_without_credentials(guarded: ThreadServer, origin: str) -> None:
    answer = _preflight(guarded.url, origin)
    assert answer.status_code in (200, 204)
    assert answer.headers["access-control-allow-origin"] == origin
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert "authorization" in answer.headers["access-control-allow-headers"].lower()
    # The real request still needs the password, and carries the CORS header either way.
    refused = httpx.get(f"{guarded.url}/session", headers={"Origin": origin})
    assert refused.status_code == 401
    ok = httpx.get(f"{guarded.url}/session", headers={"Origin": origin}, auth=("opencode", "s3cret"))
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == origin


@SQLITE
@pytest.mark.parametrize("origin", REFUSED)
def test_other_origins_are_refused(guarded: ThreadServer, origin: str) -> None:
    assert "access-control-allow-origin" not in _preflight(guarded.url, origin).headers
    # A page of such an origin cannot read the answer, and must not act either (app/api/browser.py).
    answer = httpx.get(f"{guarded.url}/session", headers={"Origin": origin}, auth=("opencode", "s3cret"))
    assert answer.status_code == 403 and "access-control-allow-origin" not in answer.headers


def test_extra_origins_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENSESSION_CORS", "https://a.example, https://b.example")
    assert Settings().cors == ["https://a.example", "https://b.example"]


@SQLITE
def test_serve_takes_cors_origins_on_the_command_line(database_url: str, project_dir: Path, config_dir: Path) -> None:
    """``opensession serve --cors ORIGIN`` (repeatable) reaches the running server."""
    port = free_port()
    args = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db", database_url]
    args += ["--directory", str(project_dir), "--cors", "https://a.example", "--cors", "https://b.example"]
    env = {**os.environ, "OPENSESSION_CONFIG_DIR": str(config_dir), "OPENSESSION_DATA_DIR": str(config_dir.parent)}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        for origin in ("https://a.example", "https://b.example"):
            assert _preflight(url, origin).headers.get("access-control-allow-origin") == origin
        assert "access-control-allow-origin" not in _preflight(url, "https://c.example").headers
    finally:
        proc.terminate()
        proc.wait(10)
