"""A terminal's recent output, addressed by cursor.

A cursor counts UTF-16 code units of output since the terminal started, as OpenCode counts them
(JavaScript string lengths), so a client that adds up the text frames it received can resume at
the cursor it computed. The text is kept UTF-16-LE encoded so a cursor is a byte offset / 2.
Invariant: at most ``limit`` units are held; ``start`` is the cursor of the first one held and
``end`` the cursor after the last one ever produced."""

from __future__ import annotations

_UNIT = 2  # bytes per UTF-16 code unit


def _low_surrogate(data: bytearray, offset: int) -> bool:
    return offset + 1 < len(data) and 0xDC <= data[offset + 1] <= 0xDF


class Scrollback:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.start = 0
        self._data = bytearray()

    @property
    def end(self) -> int:
        return self.start + len(self._data) // _UNIT

    def append(self, text: str) -> None:
        """Keep ``text``; drop the oldest output beyond the limit (never half a surrogate pair)."""
        self._data += text.encode("utf-16-le")
        excess = len(self._data) - self.limit * _UNIT
        if excess <= 0:
            return
        if _low_surrogate(self._data, excess):
            excess += _UNIT
        del self._data[:excess]
        self.start += excess // _UNIT

    def since(self, cursor: int) -> str:
        """The output from ``cursor`` on (-1: none; before ``start``: everything still held;
        past ``end``, a cursor of a server that crashed before this one took the terminal up:
        everything still held too)."""
        if cursor < 0:
            return ""
        offset = 0 if cursor > self.end else max(0, cursor - self.start) * _UNIT
        return self._data[offset:].decode("utf-16-le", errors="replace")
