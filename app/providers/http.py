"""The HTTP client provider requests go through: httpx's API over aiohttp's connection pool (the
``httpx-aiohttp`` transport, the one OpenAI's SDK offers as ``DefaultAioHttpClient``).

Why not httpx's own transport (httpcore on anyio): it enters a cancel scope and takes a lock for
every read and write, and polls each idle connection of its pool on every request. A streamed chat
completion from a local stub cost 1.0 ms of client CPU that way and 0.57 ms over aiohttp; with 20
requests in flight, 2.6 ms against 0.41 ms (``python bench/provider_client.py``: the same stub
and client loop, only the transport swapped). Under load that was about a fifth of the server's
CPU per prompt. The code above the transport is unchanged: requests, responses and ``httpx_sse`` are
httpx's, and aiohttp's errors arrive as httpx's (``httpx.TransportError`` and its subclasses)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

import aiohttp
import certifi
import httpx
from httpx_aiohttp import AiohttpTransport
from httpx_sse import EventSource, aconnect_sse

KEEPALIVE_S = 30.0  # an idle connection is kept this long for the session's next turn
_RELEASED = httpx.ByteStream(b"")  # what a closed response holds instead of its stream


@cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle takes about 60 ms."""
    return ssl.create_default_context(cafile=certifi.where())


def warm() -> None:
    """Load the CA bundle ahead of the first request (``registry.load_modules``)."""
    tls_context()


def _session() -> aiohttp.ClientSession:
    """Made on the first request, on the event loop (an aiohttp session belongs to one loop).
    No limit on connections, as before: each turn in flight holds one, idle ones are reused."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=tls_context(), keepalive_timeout=KEEPALIVE_S)
    )


def client(*, headers: dict[str, str], timeout: httpx.Timeout) -> httpx.AsyncClient:
    """A client for one provider; ``timeout`` as httpx's (``read``: the longest wait between
    two chunks of a stream). Environment proxies are not used, as before."""
    transport = AiohttpTransport(verify=tls_context(), trust_env=False, client=_session)
    return httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout, trust_env=False)


@asynccontextmanager
async def sse(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> AsyncIterator[EventSource]:
    """``httpx_sse.aconnect_sse``; once the response is closed, it lets go of its stream.

    Why: httpx links a streamed response and its stream both ways (the stream closes the
    response). That reference cycle, with the request, the headers and aiohttp's response hanging
    off it (about 40 objects per provider request), was left for the garbage collector, whose
    collections of such cycles were a sizeable part of the server's CPU under load
    (bench/load.py). Without the cycle, reference counting frees it all at once."""
    source: EventSource | None = None
    try:
        async with aconnect_sse(client, method, url, **kwargs) as source:
            yield source
    finally:
        if source is not None:
            source.response.stream = _RELEASED
