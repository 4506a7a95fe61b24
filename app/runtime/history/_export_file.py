"""An export file read one message at a time.

Why: a long session's export is tens of megabytes, and decoded whole into Python objects it took
about ten times that in server memory. ``members`` reads the file in
chunks and decodes one value at a time: the members of the top-level object in file order, the
elements of its ``messages`` array one by one (``Elements``), so what is held is the largest
message, not the document.

The text must be UTF-8 JSON, as every request body (app/api/bodies.py): bytes that are not UTF-8,
``NaN`` and ``Infinity`` are refused (``ExportSyntax``). Values that are JSON but cannot be stored
(a lone surrogate escape, an integer beyond 64 bits) are the importer's to refuse.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO, Any

CHUNK = 1 << 20  # bytes read at a time (and at least as much again for a value longer than that)


class ExportSyntax(ValueError):
    """The file is not JSON text, or not a JSON object: the message says what, and where."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_WHITESPACE = " \t\n\r"


class _Text:
    """The file's text from the current position on, decoded as it is read; what was consumed
    is dropped when more is read, so the text held is about one chunk or one value."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._at = 0  # the current position in ``_text``
        self._dropped = 0  # characters consumed and dropped before ``_text``
        self._bytes = 0  # bytes read so far
        self._end = False  # the whole file is in ``_text``

    def _read(self, size: int) -> None:
        data = self._file.read(size)
        try:
            fresh = self._utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            at = self._bytes + exc.start
            raise ExportSyntax(f"Request body must be UTF-8 JSON: invalid UTF-8 at byte {at}") from None
        self._bytes += len(data)
        self._dropped += self._at
        self._text = self._text[self._at :] + fresh
        self._at = 0
        self._end = not data

    def error(self, message: str, at: int | None = None) -> ExportSyntax:
        where = self._dropped + (self._at if at is None else at)
        return ExportSyntax(f"the export is not JSON: {message} (character {where})")

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end of the file)."""
        while True:
            text, at = self._text, self._at
            while at < len(text) and text[at] in _WHITESPACE:
                at += 1
            self._at = at
            if at < len(text) or self._end:
                return text[at] if at < len(text) else ""
            self._read(CHUNK)

    def take(self, expected: str) -> str:
        """The next character, one of ``expected``."""
        char = self.peek()
        if not char or char not in expected:
            raise self.error(f"Expecting {' or '.join(repr(c) for c in expected)}")
        self._at += 1
        return char

    def value(self) -> Any:
        """The next JSON value. One longer than the text read so far is read again with as much
        text again each time, so a long value costs a few parses of it, not one per chunk."""
        self.peek()
        more = CHUNK
        while True:
            try:
                value, end = _DECODER.raw_decode(self._text, self._at)
            except json.JSONDecodeError as exc:
                # Cut off by the end of the text read so far (strings report where they began).
                cut = exc.pos >= len(self._text) - 8 or exc.msg.startswith("Unterminated string")
                if self._end or not cut:
                    raise self.error(exc.msg, exc.pos) from None
            except ValueError as exc:  # NaN, Infinity
                raise self.error(str(exc)) from None
            else:
                if end < len(self._text) or self._end:  # a number may go on past the text read
                    self._at = end
                    return value
            self._read(more)
            more *= 2


class Elements:
    """The elements of the ``messages`` array, decoded one at a time as they are iterated. They
    must be iterated (or ``skip``ped) before the next member is asked for."""

    def __init__(self, text: _Text) -> None:
        self._text = text
        self._done = text.peek() == "]"
        if self._done:
            text.take("]")

    def __iter__(self) -> Iterator[Any]:
        while not self._done:
            element = self._text.value()
            self._done = self._text.take(",]") == "]"
            yield element

    def skip(self) -> None:
        for _element in self:
            pass


def members(file: IO[bytes]) -> Iterator[tuple[str, Any]]:
    """The members of the JSON object ``file`` holds, as ``(name, value)`` in file order; an
    array under ``messages`` comes as ``Elements``."""
    text = _Text(file)
    if text.peek() != "{":
        raise ExportSyntax("not a session export: (top level): Input should be an object")
    text.take("{")
    closed = text.peek() == "}"
    if closed:
        text.take("}")
    while not closed:
        if text.peek() != '"':
            raise text.error("Expecting property name enclosed in double quotes")
        name = text.value()
        text.take(":")
        if name == "messages" and text.peek() == "[":
            text.take("[")
            elements = Elements(text)
            yield name, elements
            elements.skip()
        else:
            yield name, text.value()
        closed = text.take(",}") == "}"
    if text.peek():
        raise text.error("Extra data")
