"""One local stub of a model provider's streaming HTTP API, on 127.0.0.1, for every provider test:
it records each request (JSON body, headers, path) and answers with the server-sent events the
test scripts, or with an HTTP error. Each provider's test builds its own wire events on it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# One server-sent event: its ``event:`` name (None: none sent) and its JSON ``data`` (or raw text).
SSE = tuple[str | None, Any]


@dataclass
class Answer:
    """What the stub answers one request: ``events`` streamed (``delay`` seconds apart), or an HTTP
    error ``status`` with a JSON ``body``. ``cut`` drops the connection after the events, as a
    server or proxy going away mid-stream does."""

    events: Sequence[SSE] = field(default_factory=list)
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    cut: bool = False


@dataclass
class Stub:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    connections: int = 0  # TCP connections accepted (a client reusing its connection opens one)
    answer: Callable[[dict[str, Any]], Answer] = lambda _body: Answer()
    recording: threading.Lock = field(default_factory=threading.Lock)

    def chat(self) -> list[dict[str, Any]]:
        """The turns' requests (not the title generator's)."""
        return [r for r in self.requests if "title generator" not in json.dumps(r)]

    def chat_headers(self) -> list[dict[str, str]]:
        """The headers of the turns' requests, in order: a turn's title request, made in the
        background with the key of its time, may arrive after a later turn's request."""
        with self.recording:
            return [
                h for r, h in zip(self.requests, self.headers, strict=True) if "title generator" not in json.dumps(r)
            ]


def _frame(event: SSE) -> bytes:
    name, data = event
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()


@contextmanager
def sse_stub(path_prefix: str = "", keep_alive: bool = True) -> Iterator[Stub]:
    """A running stub; its ``url`` ends with ``path_prefix`` (e.g. ``/v1``). With ``keep_alive``
    the events are sent chunked on a connection that stays open for the next request, as real
    APIs do; without it each answer closes its connection."""
    stub = Stub()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            return

        def setup(self) -> None:
            super().setup()
            stub.connections += 1

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
            with stub.recording:  # the three lists stay parallel
                stub.requests.append(body)
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                stub.paths.append(self.path)
            answer = stub.answer(body)
            if answer.status != 200:
                payload = (answer.body if isinstance(answer.body, str) else json.dumps(answer.body or {})).encode()
                self.send_response(answer.status)
                for key, value in {"content-type": "application/json", **answer.headers}.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding" if keep_alive else "connection", "chunked" if keep_alive else "close")
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            for index, event in enumerate(answer.events):
                if index and answer.delay:
                    time.sleep(answer.delay)
                self._send(_frame(event), chunked=keep_alive)
            if answer.cut:
                self.close_connection = True
                return  # no terminating chunk: the client sees the stream end mid-response
            if keep_alive:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            else:
                self.close_connection = True

        def _send(self, data: bytes, chunked: bool) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
            self.wfile.flush()

    with loopback_server(Handler) as url:
        stub.url = url + path_prefix
        yield stub


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` serving on 127.0.0.1 (a port the kernel picks) in a thread; yields its URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
