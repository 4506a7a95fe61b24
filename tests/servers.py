"""Real servers for tests: opensession under uvicorn (in a thread or as a separate process) and a
local OpenAI-compatible stub. Everything binds 127.0.0.1 on a free port."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from uvicorn.config import LifespanType

from app.api.app import create_app
from app.api.server import Server
from app.runtime.service import Runtime
from app.settings import Settings
from tests.stubs import SSE, Answer, Stub, sse_stub

ROOT = Path(__file__).resolve().parent.parent


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS_LOW = 10_000
_SLICES = 16  # test workers (pytest-xdist) draw from separate slices of the range
# Ports the Fetch standard blocks ("bad ports"): Node's fetch and browsers refuse to connect to
# them, so a server there fails every SDK or browser test ("fetch failed"). Only 10080 is >= 10000.
_FETCH_BAD_PORTS = frozenset({10080})


def free_port() -> int:
    """A free port below the kernel's ephemeral range, for a server about to listen on it.

    Why not a port the kernel picks (bind to 0): those come from the ephemeral range, which every
    outgoing connection also draws from, so with tests running in parallel a client's connection
    now and then took the port before the server bound it ("address already in use"). Below that
    range only another ``free_port`` can take it, and each test worker has its own slice."""
    high = _ephemeral_low()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    width = (high - _PORTS_LOW) // _SLICES
    start = _PORTS_LOW + (int(worker) % _SLICES if worker.isdigit() else 0) * width
    for port in random.sample(range(start, start + width), 200):
        if port in _FETCH_BAD_PORTS:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}-{start + width}")


def wait_healthy(
    url: str, timeout: float = 30.0, gone: Callable[[], bool] = lambda: False, auth: tuple[str, str] | None = None
) -> None:
    """Until ``url`` answers its health check; stops early once ``gone()`` says the server exited.

    The timeout is generous on purpose: a parallel run on two cores starts several servers at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not gone():
        try:
            if httpx.get(f"{url}/global/health", timeout=1.0, auth=auth).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"server at {url} did not become healthy" + (" (it exited)" if gone() else ""))


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


def start_in_thread(
    app: Any, port: int, *, lifespan: LifespanType = "on", runtime: Runtime | None = None
) -> tuple[uvicorn.Server, threading.Thread]:
    """uvicorn serving ``app`` on 127.0.0.1:``port`` in a daemon thread, returned once it listens
    (opensession's server, which ends its event streams at shutdown, when ``runtime`` is given)."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        # uvicorn reports SSE streams it cancels at teardown as errors; ours log on
        # their own loggers ("opensession.*"), so real failures stay visible.
        log_level="critical",
        lifespan=lifespan,
        timeout_graceful_shutdown=0.2,  # type: ignore[arg-type]  # uvicorn annotates int, waits any float
    )
    server = uvicorn.Server(config) if runtime is None else Server(config, runtime)
    thread = threading.Thread(target=server.run, name="opensession-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("test server failed to start")
        time.sleep(0.01)
    return server, thread


@contextmanager
def thread_server(settings: Settings) -> Iterator[ThreadServer]:
    app = create_app(settings)
    server, thread = start_in_thread(app, settings.port, runtime=app.state.runtime)
    handle = ThreadServer(settings, f"http://127.0.0.1:{settings.port}", server, thread)
    try:
        yield handle
    finally:
        handle.stop()


@dataclass
class ProcessServer:
    """opensession as a separate ``opensession serve`` process (for crash and restart tests).

    Its log goes to a file, not a pipe: nothing reads a pipe while the server runs, and a server
    that logged more than the pipe holds (tracebacks while its database is away) would block in
    its next write. ``log_tail()`` is there for assertion messages."""

    args: list[str]
    env: dict[str, str]
    url: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    auth: tuple[str, str] | None = None  # what its health check is asked with (a password is set)

    def start(self) -> None:
        self.spawn()
        self.wait_started()

    def spawn(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL, stderr=log)

    def wait_started(self) -> None:
        proc = self.proc
        assert proc is not None, "spawn() it first"
        try:
            wait_healthy(self.url, gone=lambda: proc.poll() is not None, auth=self.auth)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; its log ends:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

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


def start_together(*servers: ProcessServer) -> None:
    """Start ``servers`` side by side (each start is mostly waiting: about a second apiece)."""
    for server in servers:
        server.spawn()
    for server in servers:
        server.wait_started()


def process_server(db: str, directory: Path, config_dir: Path, data_dir: Path | None = None) -> ProcessServer:
    """``opensession serve`` on database ``db`` (a SQLite path or a database URL); its data
    directory is ``data_dir`` (a machine of its own) or one beside ``config_dir``."""
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
        "OPENSESSION_DATA_DIR": str(data_dir or config_dir.parent / "data"),
        "PYTHONPATH": str(ROOT),
        # On PostgreSQL a killed process's sessions are taken over once its leases expire.
        "OPENSESSION_LEASE_SECONDS": "3",
    }
    return ProcessServer(args, env, f"http://127.0.0.1:{port}", config_dir.parent / f"server-{port}.log")


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
    server: Stub

    @property
    def connections(self) -> int:
        return self.server.connections

    def chat_headers(self) -> list[dict[str, str]]:
        return self.server.chat_headers()


def _chat_answer(body: dict[str, Any], reply: StubReply) -> Answer:
    """A StubReply as chat completion chunks (the ``data:`` lines of ``/chat/completions``)."""
    if reply.status != 200:
        return Answer(status=reply.status, body=reply.body, headers=reply.headers)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SSE:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return (
            None,
            {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": body["model"], "choices": [choice]},
        )

    events = [chunk({"reasoning_content": piece}) for piece in reply.reasoning]
    events += [chunk({"content": piece}) for piece in reply.content]
    for index, call in enumerate(reply.tool_calls):
        half = len(call["arguments"]) // 2
        first = {"index": index, "id": call["id"], "type": "function"}
        events.append(
            chunk(
                {"tool_calls": [{**first, "function": {"name": call["name"], "arguments": call["arguments"][:half]}}]}
            )
        )
        events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": call["arguments"][half:]}}]}))
    events.append(chunk({}, finish="tool_calls" if reply.tool_calls else "stop"))
    usage = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "choices": [], "usage": reply.usage}
    events += [(None, usage), (None, "[DONE]")]
    return Answer(events, delay=reply.delay)


@contextmanager
def openai_stub(reply: Reply | None = None, keep_alive: bool = False) -> Iterator[OpenAIStub]:
    with sse_stub("/v1", keep_alive=keep_alive) as server:
        stub = OpenAIStub(server.url, server.requests, server.headers, reply or (lambda _body: StubReply()), server)
        server.answer = lambda body: _chat_answer(body, stub.reply(body))
        yield stub
