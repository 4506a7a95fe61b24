"""JSON responses encoded with orjson. Routes return ``JSONBody`` directly (rather than
letting FastAPI validate a response model) because the runtime already produces wire-shaped
dicts; response models are still declared on routes for the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.responses import Response, StreamingResponse

from app.jsonutil import dumpb
from app.runtime.history import RawMessage


class JSONBody(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumpb(content)


def raw_messages_json(messages: Sequence[RawMessage]) -> bytes:
    """A message list from stored JSON, spliced rather than decoded and re-encoded."""
    body = ",".join('{"info":' + m.info + ',"parts":[' + ",".join(m.parts) + "]}" for m in messages)
    return ("[" + body + "]").encode()


async def _chunks(pages: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for page in pages:
        if page:
            yield page


async def json_array(
    pages: AsyncIterator[bytes],
    *,
    head: bytes = b"[",
    tail: Callable[[], bytes] = lambda: b"]",
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON array written a page at a time: ``pages`` are its items already encoded and joined
    with commas (an empty one is skipped), ``head`` and ``tail()`` what surrounds them (``tail``
    is called once the last page is read, so it may say what the pages showed, a next cursor).

    So a list of any length holds one page in memory. The first two pages are read before the
    answer starts, so a failure there is still an error status; a list of one page is a plain
    response."""
    chunks = _chunks(pages)
    first = await anext(chunks, None)
    second = await anext(chunks, None) if first is not None else None
    if first is None or second is None:
        return Response(head + (first or b"") + tail(), media_type="application/json", headers=headers)

    start = head + first + b"," + second

    async def body() -> AsyncIterator[bytes]:
        yield start
        async for page in chunks:
            yield b"," + page
        yield tail()

    return StreamingResponse(body(), media_type="application/json", headers=headers)
