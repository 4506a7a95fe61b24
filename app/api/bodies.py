"""Request bodies are JSON text: UTF-8 (as RFC 8259 requires) without lone surrogates.

Python's JSON parser, which reads every body, also takes UTF-16 and UTF-32 bodies, a
surrogate's own UTF-8 bytes, and a ``\\ud800`` escape without its pair, and returns strings
holding lone surrogates. Nothing encodes those again (not orjson, not the databases), so a route
that took one acted and then could not answer, or kept what no listing could send back (a pty
title, a credential label). ``TextBodies`` refuses such a body with a 400 in the route family's
shape before any route runs. Query strings, paths and headers need no such check: they are
decoded with replacement characters, never into surrogates.

Cost: a body is decoded once more; only one with a ``\\u`` escape is also parsed once more.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import bad_request

_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})


def problem(body: bytes) -> str | None:
    """Why ``body`` is not JSON text, or None. Malformed JSON is None too: the route's own parser
    answers that, as before."""
    if b"\0" in body:  # never in JSON text; Python would read the body as UTF-16 or UTF-32
        return "Request body must be UTF-8 JSON: it contains NUL bytes"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"Request body must be UTF-8 JSON: invalid UTF-8 at byte {exc.start}"
    if "\\u" not in text:  # without an escape there is no surrogate: UTF-8 cannot encode one
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "Request body contains a lone surrogate (a \\ud800-\\udfff escape without its pair), which is not text"
    return None


class TextBodies:
    """Reads the whole body of a request that may carry one (``BodyLimit``, outside, bounds it),
    refuses it when ``problem`` finds one, else hands it on unchanged. Routes in ``streamed``
    read their body as a stream (too large to hold) and check it as they read it."""

    def __init__(self, app: ASGIApp, streamed: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _NO_BODY or scope["path"] in self.streamed:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        interrupted: Message | None = None  # what ended the body early (a disconnect)
        while True:
            message = await receive()
            if message["type"] != "http.request":
                interrupted = message
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        reason = problem(body) if body and interrupted is None else None
        if reason is not None:
            await bad_request(Request(scope), reason, "Payload")(scope, receive, send)
            return
        queued: list[Message] = [{"type": "http.request", "body": body, "more_body": interrupted is not None}]
        if interrupted is not None:
            queued.append(interrupted)

        async def replay() -> Message:
            return queued.pop(0) if queued else await receive()

        await self.app(scope, replay, send)
