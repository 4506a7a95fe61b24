"""Overhead of a remote (OpenAI-compatible) model over the built-in echo model, end to end.

One ``opensession serve`` subprocess (as in ``bench/bench.py``) and an instant chat-completions
stub on 127.0.0.1 in a process of its own (HTTP/1.1 keep-alive, TCP_NODELAY, the whole stream
written at once), declared as provider ``stub`` in the project's opencode.json. Two sessions, one
per model: after warm-up prompts (the first prompt of a session also generates its title, which
would compete with that turn) the measured prompts alternate between them, each awaited to
``session.idle``. What is left between the two paths is the server's own cost of calling a
provider: resolving it, building and sending the request, parsing the stream. The stub counts the
connections it accepts: one per turn would mean connections are not reused.

Run from the repository root::

    python bench/provider.py [--quick] [--json results.json]
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from bench import (
    EventStream,
    Metric,
    Server,
    cli,
    die_with_parent,
    nearest_rank,
    new_session,
    progress,
    running,
    timed,
    workspace,
)

ECHO = {"providerID": "opensession", "modelID": "echo"}
REMOTE = {"providerID": "stub", "modelID": "stub-model"}
FIRST_DELTA_TARGET_MS = 2.0  # remote minus echo, medians
IDLE_TARGET_MS = 3.0


def _sse_body() -> bytes:
    """A short completion as OpenAI streams it: role, text, finish, usage, ``[DONE]``."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "stub-model"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


class InstantStub:
    """Answers every POST at once, in a process of its own (so neither the benchmark's threads
    nor the server slow its answers); counts the connections and requests it gets."""

    def __init__(self) -> None:
        body = _sse_body()
        self._response = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: keep-alive\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self._connections = multiprocessing.Value("i", 0)
        self._requests = multiprocessing.Value("i", 0)
        self._port = multiprocessing.Value("i", 0)
        self._process = multiprocessing.Process(target=self._run, name="bench-stub", daemon=True)

    @property
    def connections(self) -> int:
        return int(self._connections.value)

    @property
    def requests(self) -> int:
        return int(self._requests.value)

    @property
    def port(self) -> int:
        return int(self._port.value)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._connections.get_lock():
            self._connections.value += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                with self._requests.get_lock():
                    self._requests.value += 1
                writer.write(self._response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _run(self) -> None:
        die_with_parent()

        async def serve() -> None:
            server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self._port.value = server.sockets[0].getsockname()[1]
            await server.serve_forever()

        asyncio.run(serve())

    def __enter__(self) -> InstantStub:
        self._process.start()
        deadline = time.monotonic() + 10
        while not self.port and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._process.terminate()
        self._process.join(timeout=5)


@contextmanager
def stub_project() -> Iterator[tuple[InstantStub, Server]]:
    with workspace("opensession-provider-bench-") as (base, project, config), InstantStub() as stub:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": f"http://127.0.0.1:{stub.port}/v1", "apiKey": "bench-key"},
            "models": {"stub-model": {}},
        }
        (project / "opencode.json").write_text(json.dumps({"provider": {"stub": provider}}))
        with running(Server(base / "bench.db", project, config, base / "server.log")) as srv:
            yield stub, srv


def prompt_once(
    client: httpx.Client, events: EventStream, session_id: str, model: dict[str, str]
) -> tuple[float, float]:
    """(prompt -> first delta, prompt -> idle) in ms for one prompt on an idle session."""
    events.drain()
    started = time.perf_counter()
    body = {"parts": [{"type": "text", "text": "hi"}], "model": model}
    timed(lambda: client.post(f"/session/{session_id}/prompt_async", json=body), 204)
    seen = events.wait_for(session_id, {"message.part.delta", "session.idle"})
    return (seen["message.part.delta"] - started) * 1000, (seen["session.idle"] - started) * 1000


def _difference(name: str, remote: Metric, echo: Metric, target: float, notes: list[str]) -> Metric:
    p50 = statistics.median(remote.samples) - statistics.median(echo.samples)
    p90 = nearest_rank(remote.samples, 0.9) - nearest_rank(echo.samples, 0.9)
    notes.append(f"{name}: remote - echo = {p50:+.2f} ms at p50, {p90:+.2f} ms at p90")
    return Metric(f"{name}: remote - echo", "ms", target, value=p50)


def run(quick: bool, notes: list[str]) -> list[Metric]:
    warmup, iterations = (3, 20) if quick else (5, 100)
    echo_delta = Metric("echo: prompt -> first delta", "ms", 5)
    remote_delta = Metric("remote: prompt -> first delta", "ms", 5 + FIRST_DELTA_TARGET_MS)
    echo_idle = Metric("echo: prompt -> session.idle", "ms", 15)
    remote_idle = Metric("remote: prompt -> session.idle", "ms", 15 + IDLE_TARGET_MS)
    with (
        stub_project() as (stub, srv),
        httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as client,
        EventStream(srv.url) as events,
    ):
        paths = [
            (new_session(client), ECHO, echo_delta, echo_idle),
            (new_session(client), REMOTE, remote_delta, remote_idle),
        ]
        progress(f"server at {srv.url}, stub on port {stub.port}: {warmup} warm-up prompts per model")
        for _ in range(warmup):
            for session_id, model, _delta, _idle in paths:
                prompt_once(client, events, session_id, model)
        time.sleep(0.2)  # titles of the first prompts finish off the clock
        connections, requests = stub.connections, stub.requests
        progress(f"{iterations} measured prompts per model, alternating")
        for _ in range(iterations):
            for session_id, model, delta, idle in paths:
                first, done = prompt_once(client, events, session_id, model)
                delta.samples.append(first)
                idle.samples.append(done)
        notes.append(
            f"stub: {stub.requests - requests} requests over {stub.connections - connections} new connections "
            f"during the measured prompts ({stub.connections} connections, {stub.requests} requests in all)"
        )
    return [
        echo_delta,
        remote_delta,
        _difference("first delta", remote_delta, echo_delta, FIRST_DELTA_TARGET_MS, notes),
        echo_idle,
        remote_idle,
        _difference("idle", remote_idle, echo_idle, IDLE_TARGET_MS, notes),
    ]


def main(argv: list[str] | None = None) -> int:
    return cli(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
