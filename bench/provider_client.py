"""Client CPU per streamed chat completion, three ways: the provider's (``app/providers/http.py``
``sse``: a request built by httpx's client, sent straight to its aiohttp transport), the same
client's ``stream`` (``httpx_sse.aconnect_sse``: the client's auth, redirect and cookie layers
around the same transport), and httpx's own transport (httpcore on anyio).

Each streams the same completions from the instant stub (``bench/stub.py``, a process of its own)
in this process's uvloop, parsed the way the provider parses them (``httpx_sse``, then
``json.loads`` per chunk), one request at a time and then 20 in flight. The figure is this
process's CPU time (user + system) per request; the stub's is not counted.

Run from the repository root::

    python bench/provider_client.py [--quick]
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx
from httpx_sse import EventSource, aconnect_sse
from stub import InstantStub

from app.providers import http
from bench import uvloop

TIMEOUT = httpx.Timeout(300.0, connect=15.0)
BODY = json.dumps({"model": "stub-model", "messages": [{"role": "user", "content": "hi " * 200}], "stream": True})
HEADERS = {"content-type": "application/json"}
Stream = Callable[[str], AbstractAsyncContextManager[EventSource]]


def _provider_sse() -> tuple[httpx.AsyncClient, Stream]:
    client = http.client(headers={}, timeout=TIMEOUT)
    return client, lambda url: http.sse(client, "POST", url, content=BODY, headers=HEADERS)


def _client_stream(client: httpx.AsyncClient) -> tuple[httpx.AsyncClient, Stream]:
    return client, lambda url: aconnect_sse(client, "POST", url, content=BODY, headers=dict(HEADERS))


WAYS: dict[str, Callable[[], tuple[httpx.AsyncClient, Stream]]] = {
    "the provider's (http.sse, straight to the aiohttp transport)": _provider_sse,
    "httpx client.stream over aiohttp": lambda: _client_stream(http.client(headers={}, timeout=TIMEOUT)),
    "httpx client.stream, httpx's own transport": lambda: _client_stream(
        httpx.AsyncClient(
            timeout=TIMEOUT, trust_env=False, limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
        )
    ),
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    make: Callable[[], tuple[httpx.AsyncClient, Stream]], url: str, requests: int, in_flight: int
) -> tuple[float, float]:
    """Returns (CPU microseconds per request, requests per second)."""
    client, stream = make()

    async def completion() -> None:
        async with stream(url) as sse:
            async for event in sse.aiter_sse():
                if event.data.strip() != "[DONE]":
                    json.loads(event.data)

    async def worker(count: int) -> None:
        for _ in range(count):
            await completion()

    try:
        await asyncio.gather(*(worker(10) for _ in range(in_flight)))  # connections open, code warm
        cpu, started = _cpu(), time.perf_counter()
        await asyncio.gather(*(worker(requests // in_flight) for _ in range(in_flight)))
        elapsed, cpu = time.perf_counter() - started, _cpu() - cpu
    finally:
        await client.aclose()
    return cpu / requests * 1e6, requests / elapsed


def main() -> None:
    requests = 200 if "--quick" in sys.argv else 2000
    with InstantStub() as stub:
        url = f"http://127.0.0.1:{stub.port}/v1/chat/completions"
        print("| client | in flight | CPU per request | requests/s |")
        print("| --- | --- | --- | --- |")
        for in_flight in (1, 20):
            for name, make in WAYS.items():
                run = uvloop.run if uvloop is not None else asyncio.run
                per_request, rate = run(_measure(make, url, requests, in_flight))
                print(f"| {name} | {in_flight} | {per_request:.0f} µs | {rate:.0f} |")


if __name__ == "__main__":
    main()
