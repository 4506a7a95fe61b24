"""Listing a directory and reading a file of the project, confined to it.

Listings follow OpenCode: directories first, then files, each in a case-insensitive collation
where punctuation sorts before digits and digits before letters; symlinks are left out (a link
may lead out of the project, and OpenCode lists neither kind); ``.git`` is listed. Reads tell
text from binary by content (UTF-8 without NUL bytes is text); binary comes back base64-encoded
with a MIME type. Text is trimmed of surrounding whitespace, as OpenCode does, and capped at
``MAX_TEXT_BYTES`` (with ``truncated: true``) so a huge file cannot exhaust the server."""

from __future__ import annotations

import base64
import mimetypes
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.jsonutil import readable
from app.runtime.errors import InvalidInput, PathNotFound
from app.runtime.workspace._ignore import IgnoreRules
from app.runtime.workspace._paths import relative

MAX_TEXT_BYTES = 8 * 1024 * 1024
MAX_BINARY_BYTES = 8 * 1024 * 1024
_SNIFF_BYTES = 8192
_PUNCTUATION = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"


def _collation(name: str) -> tuple[tuple[int, int], ...]:
    """An approximation of the ICU root collation JavaScript's ``localeCompare`` uses."""
    key: list[tuple[int, int]] = []
    for char in name:
        lower = char.lower()
        if char in _PUNCTUATION:
            key.append((0, _PUNCTUATION.index(char)))
        elif char in string.whitespace:
            key.append((0, -1))
        elif char.isdigit():
            key.append((1, ord(char)))
        else:
            key.append((2, ord(lower)))
    return tuple(key)


def sort_key(name: str) -> tuple[tuple[tuple[int, int], ...], str]:
    """Case-insensitive first; among names equal but for case, lower case first."""
    return _collation(name), name.swapcase()


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    path: str  # relative to the project root
    absolute: str
    is_dir: bool
    ignored: bool

    def node(self) -> dict[str, Any]:
        """OpenCode's ``FileNode`` (a directory's ``path`` ends with ``/``)."""
        kind = "directory" if self.is_dir else "file"
        path = self.path + "/" if self.is_dir else self.path
        node = {"name": self.name, "path": path, "absolute": self.absolute, "type": kind, "ignored": self.ignored}
        return readable(node)  # a name that is not UTF-8 is shown, not refused


def list_directory(root: Path, folder: Path, raw: str, extra_ignores: Sequence[str]) -> list[Entry]:
    """The direct children of ``folder`` (already confined to ``root``)."""
    if not folder.exists():
        raise PathNotFound(raw)
    if not folder.is_dir():
        raise InvalidInput(f"Not a directory: {raw}", kind="Query", field="path")
    base = relative(folder, root)
    rules = IgnoreRules(root, base, extra_ignores)
    entries: list[Entry] = []
    with os.scandir(folder) as children:
        for child in children:
            if child.is_symlink():
                continue
            is_dir = child.is_dir(follow_symlinks=False)
            rel = f"{base}/{child.name}" if base else child.name
            entries.append(Entry(child.name, rel, str(folder / child.name), is_dir, rules.ignored(rel, is_dir)))
    entries.sort(key=lambda e: (not e.is_dir, sort_key(e.name)))
    return entries


def _regular(path: Path, raw: str) -> None:
    if not path.exists():
        raise PathNotFound(raw)
    if not path.is_file():
        raise InvalidInput(f"Not a file: {raw}", kind="Query", field="path")


def mime_type(path: Path) -> str:
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def read_content(path: Path, raw: str) -> dict[str, Any]:
    """OpenCode's ``FileContent`` for the file at ``path`` (already confined)."""
    _regular(path, raw)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(_SNIFF_BYTES)
        text = _text(head)
        cap = MAX_TEXT_BYTES if text is not None else MAX_BINARY_BYTES
        data = head + handle.read(cap - len(head)) if size > len(head) else head
    truncated = size > len(data)
    if text is not None and (decoded := _text(data, partial=truncated)) is not None:
        body: dict[str, Any] = {"type": "text", "content": decoded.strip()}
    else:
        mime = mime_type(path)
        if mime.startswith("text/"):
            mime = "application/octet-stream"
        body = {"type": "binary", "content": base64.b64encode(data).decode(), "encoding": "base64", "mimeType": mime}
    if truncated:
        body["truncated"] = True
    return body


def _text(data: bytes, *, partial: bool = True) -> str | None:
    """``data`` decoded when it is UTF-8 text; a sequence cut at the end is allowed if partial."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if partial and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
        return None


def regular_file(path: Path, raw: str) -> Path:
    """``path`` when it is a readable regular file (for serving its bytes as they are: opened
    here, so a file that cannot be read is refused before the answer starts)."""
    _regular(path, raw)
    path.open("rb").close()
    return path
