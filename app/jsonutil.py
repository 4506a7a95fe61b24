"""One JSON codec for the whole server (orjson: several times faster than the stdlib on the hot
paths: event frames, stored rows and responses).

orjson refuses integers beyond 64 bits and strings with lone surrogates, both of which Python's
own parser lets into a request body. Everything the server encodes that it did not build itself
came from a client, so such a value is the client's bad input: ``UnencodableValue`` (a
ValueError) is answered with a 400 and the write it was part of is rolled back.

What the server reports of the outside world is another matter: a file name that is not UTF-8
reaches Python as escape surrogates, and must still be listed and stored. ``readable`` shows
each such byte as U+FFFD, as a UTF-8 decoder does.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson

T = TypeVar("T")


class UnencodableValue(ValueError):
    """A value that cannot be stored as JSON (an integer beyond 64 bits, a lone surrogate)."""


def dumpb(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise UnencodableValue(f"Request contains a value that cannot be stored: {exc}") from exc


def dumps(value: Any) -> str:
    return dumpb(value).decode()


loads = orjson.loads


def readable(value: T) -> T:
    """``value`` (strings, lists, dicts of them) with each lone surrogate in its strings, keys
    included, replaced by U+FFFD (one per byte a ``surrogateescape`` name could not decode)."""
    if isinstance(value, str):
        return _readable_text(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [readable(item) for item in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {readable(key): readable(item) for key, item in value.items()}  # type: ignore[return-value]
    return value


def _readable_text(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate that does not stand for a byte
            raw = text.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "replace")
    return text
