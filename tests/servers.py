"""Real servers for tests: opensession under uvicorn (in a thread or as a separate process) and a
local OpenAI-compatible stub. Everything binds 127.0.0.1 on a free port."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.api.app import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/global/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"server at {url} did not become healthy")


@dataclass
class ThreadServer:
    """opensession running under uvicorn in a background thread of the test process."""

    settings: Settings
    url: str
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def runtime(self) -> Any:
        return self._server.config.app.state.runtime  # type: ignore[union-attr]

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop, for tests that observe the runtime from inside it."""
        return self._server.servers[0].get_loop()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)


@contextmanager
def thread_server(settings: Settings) -> Iterator[ThreadServer]:
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=settings.port,
        # uvicorn reports SSE streams it cancels at teardown as errors; ours log on
        # their own loggers ("opensession.*"), so real failures stay visible.
        log_level="critical",
        lifespan="on",
        timeout_graceful_shutdown=0.2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="opensession-test-server", daemon=True)
    thread.start()
    handle = ThreadServer(settings, f"http://127.0.0.1:{settings.port}", server, thread)
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server failed to start")
        time.sleep(0.01)
    try:
        yield handle
    finally:
        handle.stop()


@dataclass
class ProcessServer:
    """opensession as a separate ``opensession serve`` process (for crash and restart tests)."""

    args: list[str]
    env: dict[str, str]
    url: str
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_healthy(self.url)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def process_server(db: str, directory: Path, config_dir: Path) -> ProcessServer:
    """``opensession serve`` on database ``db`` (a SQLite path or a database URL)."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--port",
        str(port),
        "--db",
        str(db),
        "--directory",
        str(directory),
    ]
    env = {
        **os.environ,
        "OPENSESSION_CONFIG_DIR": str(config_dir),
        "OPENSESSION_DATA_DIR": str(config_dir.parent / "data"),
        "PYTHONPATH": str(ROOT),
        # On PostgreSQL a killed process's sessions are taken over once its leases expire.
        "OPENSESSION_LEASE_SECONDS": "3",
    }
    return ProcessServer(args, env, f"http://127.0.0.1:{port}")


# -- OpenAI-compatible stub ---------------------------------------------------------------------

Reply = Callable[[dict[str, Any]], "StubReply"]


@dataclass
class StubReply:
    """What the stub answers: streamed ``content`` pieces (and ``reasoning`` pieces), or an HTTP
    error ``status`` with ``body`` and ``headers``."""

    content: list[str] = field(default_factory=lambda: ["Hello", " from", " stub"])
    reasoning: list[str] = field(default_factory=list)
    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Any] = field(
        default_factory=lambda: {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    )
    delay: float = 0.0
    # Tool calls to stream ({"id", "name", "arguments"}); their arguments arrive in two pieces.
    tool_calls: list[dict[str, str]] = field(default_factory=list)


@dataclass
class OpenAIStub:
    url: str
    requests: list[dict[str, Any]]
    headers: list[dict[str, str]]
    reply: Reply


class StubHandler(BaseHTTPRequestHandler):
    """What the local provider stubs share: HTTP/1.1, quiet, bodies recorded, errors as JSON,
    streams as server-sent events."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: Any) -> None:
        return

    def record(self, requests: list[dict[str, Any]], headers: list[dict[str, str]]) -> dict[str, Any]:
        """The request's JSON body, kept (with its headers) among what the stub received."""
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        requests.append(body)
        headers.append({k.lower(): v for k, v in self.headers.items()})
        return body

    def answer_error(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in {"content-type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def start_stream(self, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()


@contextmanager
def stub_server(handler: type[StubHandler]) -> Iterator[str]:
    """``handler`` serving on 127.0.0.1 in a thread; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def openai_stub(reply: Reply | None = None) -> Iterator[OpenAIStub]:
    stub = OpenAIStub(url="", requests=[], headers=[], reply=reply or (lambda _body: StubReply()))

    class Handler(StubHandler):
        def do_POST(self) -> None:
            body = self.record(stub.requests, stub.headers)
            answer = stub.reply(body)
            if answer.status != 200:
                self.answer_error(answer.status, answer.body.encode(), answer.headers)
                return
            self.start_stream()

            def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> None:
                data: dict[str, Any] = {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion.chunk",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                if usage is not None:
                    data = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "choices": [], "usage": usage}
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if answer.delay:
                    time.sleep(answer.delay)

            for piece in answer.reasoning:
                chunk({"reasoning_content": piece})
            for piece in answer.content:
                chunk({"content": piece})
            for index, call in enumerate(answer.tool_calls):
                half = len(call["arguments"]) // 2
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["name"], "arguments": call["arguments"][:half]},
                            }
                        ]
                    }
                )
                chunk({"tool_calls": [{"index": index, "function": {"arguments": call["arguments"][half:]}}]})
            chunk({}, finish="tool_calls" if answer.tool_calls else "stop")
            chunk({}, usage=answer.usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    with stub_server(Handler) as url:
        stub.url = f"{url}/v1"
        yield stub
