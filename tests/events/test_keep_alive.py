"""Idle HTTP connections stay open well beyond clients' pool expiry (commonly 5 s): a server that
closed them at 5 s (uvicorn's default) now and then closed one just as a client reused it, and
that request got no answer. Every way the server starts (``opensession serve``, the command
line's in-process server, the tests' thread server) keeps them ``keep_alive_seconds``.

Keep-alive does not depend on the database engine: these run on SQLite only."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from app.cli.client import _local_server
from app.settings import Settings
from tests.servers import process_server, thread_server

sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _health(sock: socket.socket, port: int) -> bytes:
    """One request on ``sock``: the response's status line, or b"" if the server closed it."""
    sock.sendall(f"GET /global/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        received += chunk
    head, body = received.split(b"\r\n\r\n", 1)
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n", 1)[0]


def _closed_after_idle(port: int, idle: float) -> bool:
    """Whether the server closes a connection that was used once and then idle for ``idle`` s."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert _health(sock, port) == b"HTTP/1.1 200 OK"
        time.sleep(idle)
        try:
            return _health(sock, port) == b""
        except ConnectionError:
            return True


@pytest.mark.slow
@sqlite_only
def test_a_connection_idle_longer_than_clients_pool_expiry_is_reused(settings: Settings) -> None:
    assert settings.keep_alive_seconds >= 60  # well beyond clients' 5 s, with margin for their clocks
    with thread_server(settings) as server:
        assert not _closed_after_idle(server.settings.port, 6.0)


@sqlite_only
def test_the_configured_keep_alive_is_what_the_server_keeps(settings: Settings) -> None:
    with thread_server(settings.model_copy(update={"keep_alive_seconds": 1})) as server:
        assert _closed_after_idle(server.settings.port, 2.0)


def test_opensession_serve_keeps_the_configured_keep_alive(tmp_path: Path, project_dir: Path, config_dir: Path) -> None:
    server = process_server(str(tmp_path / "serve.db"), project_dir, config_dir)
    server.env["OPENSESSION_KEEP_ALIVE_SECONDS"] = "1"
    server.start()
    try:
        port = int(server.url.rsplit(":", 1)[1])
        assert _closed_after_idle(port, 2.0)
    finally:
        server.stop()


def test_the_command_lines_own_server_keeps_the_configured_keep_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENSESSION_DB", str(tmp_path / "local.db"))
    monkeypatch.setenv("OPENSESSION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENSESSION_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENSESSION_KEEP_ALIVE_SECONDS", "1")
    with _local_server() as url:
        assert _closed_after_idle(int(url.rsplit(":", 1)[1]), 2.0)
