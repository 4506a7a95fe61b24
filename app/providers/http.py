"""The HTTP client provider requests go through: httpx's API over aiohttp's connection pool (the
``httpx-aiohttp`` transport, the one OpenAI's SDK offers as ``DefaultAioHttpClient``).

Why not httpx's own transport (httpcore on anyio): it enters a cancel scope and takes a lock for
every read and write, and polls each idle connection of its pool on every request. A streamed chat
completion cost several times the client CPU that way, the more so with many in flight: a sizeable
part of the server's CPU per prompt under load (``python bench/provider_client.py``; figures in
bench/README.md, "Figures behind the code's choices"). Requests, responses and ``httpx_sse`` are
httpx's, and aiohttp's errors arrive as httpx's (``httpx.TransportError`` and its subclasses);
streamed completions skip the client's own layers (``sse``)."""

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
from httpx_sse import EventSource

KEEPALIVE_S = 30.0  # an idle connection is kept this long for the session's next turn


@cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle takes tens of milliseconds."""
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


class ProviderClient(httpx.AsyncClient):
    """httpx's client for one provider, keeping its transport at hand for ``sse``."""

    def __init__(self, *, transport: AiohttpTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        self.transport = transport


def client(*, headers: dict[str, str], timeout: httpx.Timeout) -> ProviderClient:
    """A client for one provider; ``timeout`` as httpx's (``read``: the longest wait between
    two chunks of a stream). Environment proxies are not used, as before."""
    transport = AiohttpTransport(verify=tls_context(), trust_env=False, client=_session)
    return ProviderClient(transport=transport, headers=headers, timeout=timeout, trust_env=False)


@asynccontextmanager
async def sse(client: ProviderClient, method: str, url: httpx.URL | str, **kwargs: Any) -> AsyncIterator[EventSource]:
    """A request whose response is a stream of server-sent events, built by ``client`` (its
    headers and timeouts) and sent straight to its transport.

    Why not ``client.stream`` (``httpx_sse.aconnect_sse``, as before): the layers the client adds
    around its transport (auth flow, redirect loop, cookie jar, event hooks, a stream bound to its
    response) cost more CPU than aiohttp's whole request, and providers use none of them: keys
    travel in headers, and httpx follows no redirect unless told to
    (``python bench/provider_client.py`` compares both ways). What stays httpx's: the request, the
    response and its content decoding, aiohttp's errors as httpx's, and ``httpx_sse``'s parser.

    The response is closed on the way out. Not being bound to its stream, it is freed by
    reference counting, not left in a cycle for the garbage collector (a sizeable part of the
    server's CPU under load before, ``bench/load.py``)."""
    headers = {**kwargs.pop("headers", {}), "Accept": "text/event-stream", "Cache-Control": "no-store"}
    request = client.build_request(method, url, headers=headers, **kwargs)
    response = await client.transport.handle_async_request(request)
    try:
        yield EventSource(response)
    finally:
        await response.aclose()
