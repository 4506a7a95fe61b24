"""Changing a configuration file the way ``PATCH /config`` and ``PATCH /global/config`` do: the
patch is merged into the file *as written*, a key at a time, so its comments, its layout and its
``{env:VAR}`` / ``{file:path}`` tokens stay (nothing substituted is ever written back), as
OpenCode's ``patchJsonc`` does (jsonc-parser's ``modify``).

Merging: an object in the patch merges into the object at its key (key by key, recursively), any
other value replaces what is there (an object over a scalar or array replaces it too), and
``null`` removes the key. The result must parse, or nothing is written.

Writing: under an exclusive ``flock`` on the file's directory (several requests, or processes on
one machine, never interleave a read-modify-write), to a temporary file in the same directory
that is then renamed over the file (a reader sees the old file or the new one, never half of
one). A symlinked file is written where the link points, keeping the link; the file's mode stays.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.config import CONFIG_SCHEMA, ConfigError
from app.jsonutil import UnencodableValue, dumpb

Key = tuple[str, ...]
INDENT = "  "
MAX_DEPTH = 64  # objects and arrays nested deeper than this, in a file or a patch, are refused


@dataclass
class _Node:
    """A value in the text: ``start``/``end`` delimit it; an object's properties are in order."""

    kind: str  # "object", "array" or "scalar"
    start: int
    end: int = 0
    props: list[_Prop] = field(default_factory=list)
    items: list[_Node] = field(default_factory=list)


@dataclass
class _Prop:
    key: str
    key_start: int
    value: _Node


class _Parser:
    """JSONC (comments, trailing commas) into ``_Node``s with their positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.depth = 0

    def fail(self, what: str) -> ConfigError:
        line = self.text.count("\n", 0, self.at) + 1
        column = self.at - (self.text.rfind("\n", 0, self.at) + 1) + 1
        return ConfigError(f"{what} at line {line}, column {column}")

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.at < n:
            char = text[self.at]
            if char in " \t\r\n\ufeff":
                self.at += 1
            elif text.startswith("//", self.at):
                end = text.find("\n", self.at)
                self.at = n if end < 0 else end
            elif text.startswith("/*", self.at):
                end = text.find("*/", self.at + 2)
                if end < 0:
                    raise self.fail("Unterminated comment")
                self.at = end + 2
            else:
                return

    def document(self) -> _Node:
        self.skip()
        if self.at >= len(self.text) or self.text[self.at] != "{":
            raise self.fail("Expected a JSON object")
        root = self.value()
        self.skip()
        if self.at < len(self.text):
            raise self.fail("Unexpected text after the object")
        return root

    def value(self) -> _Node:
        self.skip()
        if self.at >= len(self.text):
            raise self.fail("Unexpected end of text")
        char = self.text[self.at]
        if char == "{":
            return self.container("object", "}")
        if char == "[":
            return self.container("array", "]")
        node = _Node("scalar", self.at)
        if char == '"':
            self.string()
        else:
            decoder = json.JSONDecoder()
            try:
                _, self.at = decoder.raw_decode(self.text, self.at)
            except ValueError:
                raise self.fail("Unexpected character") from None
        node.end = self.at
        return node

    def string(self) -> str:
        try:
            value, self.at = json.decoder.scanstring(self.text, self.at + 1)  # type: ignore[attr-defined]
        except ValueError:
            raise self.fail("Invalid string") from None
        return str(value)

    def container(self, kind: str, close: str) -> _Node:
        node = _Node(kind, self.at)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"Nested more than {MAX_DEPTH} levels deep")
        self.at += 1
        while True:
            self.skip()
            if self.at < len(self.text) and self.text[self.at] == close:
                self.at += 1
                node.end = self.at
                self.depth -= 1
                return node
            if kind == "object":
                if self.at >= len(self.text) or self.text[self.at] != '"':
                    raise self.fail("Expected a property name")
                key_start = self.at
                key = self.string()
                self.skip()
                if self.at >= len(self.text) or self.text[self.at] != ":":
                    raise self.fail("Expected ':'")
                self.at += 1
                node.props.append(_Prop(key, key_start, self.value()))
            else:
                node.items.append(self.value())
            self.skip()
            if self.at < len(self.text) and self.text[self.at] == ",":
                self.at += 1
            elif self.at >= len(self.text) or self.text[self.at] != close:
                raise self.fail(f"Expected ',' or '{close}'")


def _value(text: str, node: _Node) -> Any:
    if node.kind == "object":
        return {p.key: _value(text, p.value) for p in node.props}
    if node.kind == "array":
        return [_value(text, item) for item in node.items]
    return json.loads(text[node.start : node.end])


def parse(text: str) -> dict[str, Any]:
    """The object a JSONC text holds (``ConfigError`` saying where it is not one)."""
    value = _value(text, _Parser(text).document())
    assert isinstance(value, dict)
    return value


def _find(root: _Node, key: Key) -> tuple[_Node, int, int]:
    """The node at ``key``, how many of its parts exist (the deepest node found when short), and
    where that node's own key starts (-1 for the root)."""
    node, key_start = root, -1
    for depth, part in enumerate(key):
        prop = next((p for p in node.props if p.key == part), None) if node.kind == "object" else None
        if prop is None:
            return node, depth, key_start
        node, key_start = prop.value, prop.key_start
    return node, len(key), key_start


def _line_indent(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    line = text[start:]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _starts_line(text: str, at: int) -> bool:
    start = text.rfind("\n", 0, at) + 1
    return not text[start:at].strip()


def _render(value: Any, indent: str) -> str:
    return _json(value, indent=2).replace("\n", "\n" + indent)


def _json(value: Any, indent: int | None = None) -> str:
    """JSON text of a patch's value: strict JSON (no NaN or Infinity, which JSONC readers refuse)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False)


def _nest(key: Key, value: Any) -> Any:
    for part in reversed(key):
        value = {part: value}
    return value


def _set(text: str, key: Key, value: Any) -> str:
    root = _Parser(text).document()
    node, depth, key_start = _find(root, key)
    if depth == len(key) or node.kind != "object":  # replace what is there (a non-object ancestor too)
        if depth < len(key):
            value = _nest(key[depth:], value)
        if key_start >= 0 and not _starts_line(text, key_start):  # within a one-line object
            rendered = _json(value)
        else:
            rendered = _render(value, _line_indent(text, node.start))
        return text[: node.start] + rendered + text[node.end :]
    name, rest = key[depth], _nest(key[depth + 1 :], value)
    if node.props:
        last = node.props[-1]
        after = last.value.end
        tail = text[after : node.end - 1]
        stripped = tail.lstrip()
        if stripped.startswith(","):  # a trailing comma: add after it, needing none of our own
            after += len(tail) - len(stripped) + 1
            lead = ""
        else:
            lead = ","
        if _starts_line(text, last.key_start):
            indent = _line_indent(text, last.key_start)
            addition = f"{lead}\n{indent}{json.dumps(name, ensure_ascii=False)}: {_render(rest, indent)}"
        else:
            addition = f"{lead} {json.dumps(name, ensure_ascii=False)}: {_json(rest)}"
        return text[:after] + addition + text[after:]
    outer = _line_indent(text, node.start)
    inner = outer + INDENT
    entry = f"\n{inner}{json.dumps(name, ensure_ascii=False)}: {_render(rest, inner)}"
    inside = text[node.start + 1 : node.end - 1]
    if not inside.strip():
        return text[: node.start + 1] + entry + "\n" + outer + text[node.end - 1 :]
    return text[: node.start + 1] + entry + text[node.start + 1 :]


def _delete(text: str, key: Key) -> str:
    root = _Parser(text).document()
    parent, depth, _ = _find(root, key[:-1])
    if depth < len(key) - 1 or parent.kind != "object":
        return text
    index = next((i for i, p in enumerate(parent.props) if p.key == key[-1]), None)
    if index is None:
        return text
    prop = parent.props[index]
    start, end = prop.key_start, prop.value.end
    following = text[end:]
    if following.lstrip().startswith(","):
        end += len(following) - len(following.lstrip()) + 1
    elif index > 0:  # the last one: take the comma after the one before instead
        before = parent.props[index - 1].value.end
        start = before + text[before:start].index(",")
        return text[:start] + text[end:]
    if _starts_line(text, start):
        start = text.rfind("\n", 0, start)
        start = 0 if start < 0 else start
    return text[:start] + text[end:]


def too_deep(value: Any) -> bool:
    """Whether ``value`` nests objects and arrays more than ``MAX_DEPTH`` levels deep."""
    level: list[tuple[Any, int]] = [(value, 0)]
    while level:
        item, depth = level.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth >= MAX_DEPTH:
            return True
        level.extend((child, depth + 1) for child in children)
    return False


def apply_patch(text: str, patch: dict[str, Any], prefix: Key = ()) -> str:
    """``text`` with ``patch`` merged in (see the module's doc)."""
    for name, value in patch.items():
        key = (*prefix, name)
        if value is None:
            text = _delete(text, key)
        elif isinstance(value, dict):
            node, depth, _ = _find(_Parser(text).document(), key)
            if depth == len(key) and node.kind == "object":
                text = apply_patch(text, value, key)
            else:
                text = _set(text, key, _without_nulls(value))
        else:
            text = _set(text, key, value)
    return text


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


NEW_FILE = '{\n  "$schema": "' + CONFIG_SCHEMA + '"\n}\n'


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    try:
        with open(temporary, "x", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def update_file(path: Path, patch: dict[str, Any], *, create_directory: bool = False) -> tuple[dict[str, Any], bool]:
    """Merge ``patch`` into the configuration file at ``path`` (a new one holds ``$schema``),
    atomically; its content afterwards, as written (no token substituted), and whether it
    changed. ``ConfigError`` (nothing written) when the file, or the result, is not a JSONC
    object, or it cannot be written."""
    target = path.resolve() if path.is_symlink() else path
    try:
        if create_directory:
            target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.is_dir():
            raise ConfigError(f"Cannot write {path}: {target.parent} is not a directory")
        with _locked(target.parent):
            try:
                before = target.read_text(encoding="utf-8")
            except FileNotFoundError:
                before = ""
            original = before if before.strip() else NEW_FILE
            try:
                _Parser(original).document()
            except ConfigError as exc:
                raise ConfigError(f"Cannot update {path}, which is not a valid JSONC object: {exc}") from exc
            try:
                after = apply_patch(original, patch)
            except ValueError as exc:  # NaN or Infinity
                raise ConfigError(f"Cannot write {path}: {exc}") from exc
            content = parse(after)
            try:
                dumpb(content)  # what the answer (and GET /config) will send: never a file it could not
            except UnencodableValue as exc:
                raise ConfigError(f"Cannot write {path}: {exc}") from exc
            if after != before:
                _write_atomically(target, after)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"Cannot update {path}: {exc}") from exc
    return content, after != before
