"""An instant OpenAI-compatible chat-completions stub for the benchmarks, in a process of its own
(so neither the benchmark's client nor the server slows its answers): HTTP/1.1 keep-alive, the
whole stream written at once, and counters of the connections and requests it got (one new
connection per turn would mean the server does not reuse them).

By default every answer is the same short completion ("hi"); ``answer`` turns a request body into
the completion's text pieces instead (the load benchmark answers each prompt by name and stamps
the time a delta left the stub, to measure fan-out end to end). ``answer`` runs in the stub's
process: the stub is forked, so any callable works."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from bench import die_with_parent

Answer = Callable[[dict[str, Any]], list[str]]


def sse_body(pieces: list[str]) -> bytes:
    """A completion as OpenAI streams it: role, one chunk per text piece, finish, usage, ``[DONE]``."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "stub-model"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _response(body: bytes) -> bytes:
    head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: keep-alive\r\n"
    return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body


class InstantStub:
    def __init__(self, answer: Answer | None = None) -> None:
        self._answer = answer
        self._fixed = _response(sse_body(["hi"]))
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

    def _reply(self, request: bytes) -> bytes:
        if self._answer is None:
            return self._fixed
        return _response(sse_body(self._answer(json.loads(request))))

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
                request = await reader.readexactly(length)
                with self._requests.get_lock():
                    self._requests.value += 1
                writer.write(self._reply(request))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _run(self) -> None:
        die_with_parent()

        async def serve() -> None:
            server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
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
