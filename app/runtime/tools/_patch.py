"""apply_patch: OpenCode's file-oriented patch format, offered to GPT-family models instead of
edit/write (as OpenCode does).

    *** Begin Patch
    *** Add File: <path>          every following line is ``+content``
    *** Update File: <path>
    *** Move to: <path>           optional rename
    @@ <context line>             optional; then `` keep``, ``-remove``, ``+add`` lines
    *** End of File               optional: the hunk's lines end the file
    *** Delete File: <path>
    *** End Patch

Invariants: every section is verified (paths confined, files read, hunks located) before any
file is written, so a bad patch changes nothing; one ``edit`` permission covers the whole patch,
asked for every path it writes (each section's file and a move's destination, under every name
``paths.target`` gives).
Hunk lines are located as OpenCode does: exactly, then ignoring trailing whitespace, then
surrounding whitespace, then typographic punctuation.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, schema
from app.runtime.tools._checks import after_write, errors
from app.runtime.tools._files import read_text, unified_patch
from app.runtime.tools._paths import relative, target

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, UPDATE, DELETE, MOVE = "*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:"
END_OF_FILE = "*** End of File"
_HEREDOC = re.compile(r"\A(?:cat\s+)?<<['\"]?(\w+)['\"]?[ \t]*\n(.*?)\n\1\s*\Z", re.S)
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015", "-"),
        "\u2026": "...",
        "\u00a0": " ",
    }
)

DESCRIPTION = """Use the `apply_patch` tool to edit files. Your patch language is a stripped-down, file-oriented diff format designed to be easy to parse and safe to apply. You can think of it as a high-level envelope:

*** Begin Patch
[ one or more file sections ]
*** End Patch

Within that envelope, you get a sequence of file operations.
You MUST include a header to specify the action you are taking.
Each operation starts with one of three headers:

*** Add File: <path> - create a new file. Every following line is a + line (the initial contents).
*** Delete File: <path> - remove an existing file. Nothing follows.
*** Update File: <path> - patch an existing file in place (optionally with a rename).

Example patch:

```
*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch
```

It is important to remember:

- You must include a header with your intended action (Add/Delete/Update)
- You must prefix new lines with `+` even when creating a new file
"""  # noqa: E501  (OpenCode's wording, which GPT models are trained on)


class PatchError(ValueError):
    """The patch text is malformed or does not apply; the message says where."""


@dataclass
class Chunk:
    context: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    end_of_file: bool = False


@dataclass
class Section:
    kind: str  # "add", "update" or "delete"
    path: str
    content: str = ""  # add
    move_to: str | None = None  # update
    chunks: list[Chunk] = field(default_factory=list)  # update


def parse(text: str) -> list[Section]:
    """The sections of a patch; raises PatchError naming the offending line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    heredoc = _HEREDOC.match(text)
    lines = (heredoc.group(2) if heredoc else text).split("\n")
    stripped = [line.strip() for line in lines]
    if BEGIN not in stripped or END not in stripped or stripped.index(BEGIN) > stripped.index(END):
        raise PatchError("Invalid patch format: missing Begin/End markers")
    i, end = stripped.index(BEGIN) + 1, stripped.index(END)
    sections: list[Section] = []
    while i < end:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        header = next((h for h in (ADD, UPDATE, DELETE) if line.startswith(h)), None)
        path = line[len(header) :].strip() if header else ""
        if header is None or not path:
            raise PatchError(
                f"line {i + 1}: expected '{ADD} <path>', '{UPDATE} <path>' or '{DELETE} <path>', got {line!r}"
            )
        i += 1
        if header == DELETE:
            sections.append(Section("delete", path))
        elif header == ADD:
            body: list[str] = []
            while i < end and not lines[i].startswith("***"):
                if not lines[i].startswith("+"):
                    raise PatchError(f"line {i + 1}: every line of an added file starts with '+', got {lines[i]!r}")
                body.append(lines[i][1:])
                i += 1
            sections.append(Section("add", path, content="\n".join(body) + "\n" if body else ""))
        else:
            section = Section("update", path)
            if i < end and lines[i].startswith(MOVE):
                section.move_to = lines[i][len(MOVE) :].strip() or None
                i += 1
            i = _chunks(lines, i, end, section)
            if not section.chunks and section.move_to is None:
                raise PatchError(f"line {i}: the update of {path} has no hunks")
            sections.append(section)
    return sections


def _chunks(lines: list[str], i: int, end: int, section: Section) -> int:
    """Reads an update's hunks from line ``i``; returns the line after them."""
    chunk: Chunk | None = None
    while i < end and not (lines[i].startswith("***") and lines[i] != END_OF_FILE):
        line = lines[i]
        if line.startswith("@@"):
            chunk = Chunk(line[2:].strip() or None)
            section.chunks.append(chunk)
        elif line == END_OF_FILE:
            if chunk is None:
                raise PatchError(f"line {i + 1}: '{END_OF_FILE}' outside a hunk")
            chunk.end_of_file = True
        else:
            if chunk is None:  # OpenCode lets the first hunk of a section omit its @@ line
                chunk = Chunk(None)
                section.chunks.append(chunk)
            marker, rest = line[:1], line[1:]
            if marker in (" ", ""):  # an empty line is an empty context line whose space was lost
                chunk.old.append(rest)
                chunk.new.append(rest)
            elif marker == "-":
                chunk.old.append(rest)
            elif marker == "+":
                chunk.new.append(rest)
            else:
                raise PatchError(f"line {i + 1}: a hunk line starts with ' ', '-' or '+', got {line!r}")
        i += 1
    return i


# How a hunk's lines may match the file's, tried in order: exactly, then ever more leniently.
_LOOSER_AND_LOOSER: tuple[Callable[[str, str], bool], ...] = (
    lambda a, b: a == b,
    lambda a, b: a.rstrip() == b.rstrip(),
    lambda a, b: a.strip() == b.strip(),
    lambda a, b: a.strip().translate(_PUNCTUATION) == b.strip().translate(_PUNCTUATION),
)


def _seek(lines: list[str], pattern: list[str], start: int, end_of_file: bool) -> int:
    if not pattern:
        return -1
    for same in _LOOSER_AND_LOOSER:
        starts = list(range(start, len(lines) - len(pattern) + 1))
        if end_of_file and len(lines) - len(pattern) >= start:
            starts.insert(0, len(lines) - len(pattern))
        for at in starts:
            if all(same(lines[at + k], p) for k, p in enumerate(pattern)):
                return at
    return -1


def apply_chunks(name: str, text: str, chunks: list[Chunk]) -> str:
    """``text`` with the hunks applied in order; raises PatchError for lines that are not there."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    replacements: list[tuple[int, int, list[str]]] = []
    cursor = 0
    for chunk in chunks:
        if chunk.context is not None:
            at = _seek(lines, [chunk.context], cursor, False)
            if at < 0:
                raise PatchError(f"Failed to find context '{chunk.context}' in {name}")
            cursor = at + 1
        if not chunk.old:  # a pure addition goes at the end of the file, as in OpenCode
            replacements.append((len(lines), 0, chunk.new))
            continue
        old, new = chunk.old, chunk.new
        at = _seek(lines, old, cursor, chunk.end_of_file)
        if at < 0 and old[-1] == "":
            old, new = old[:-1], new[:-1] if new and new[-1] == "" else new
            at = _seek(lines, old, cursor, chunk.end_of_file)
        if at < 0:
            raise PatchError(f"Failed to find expected lines in {name}:\n" + "\n".join(chunk.old))
        replacements.append((at, len(old), new))
        cursor = at + len(old)
    for at, length, new in sorted(replacements, key=lambda r: r[0], reverse=True):
        lines[at : at + length] = new
    return "\n".join(lines) + "\n"


@dataclass
class _Change:
    kind: str  # "add", "update", "move" or "delete"
    path: Path
    before: str
    after: str
    move_to: Path | None = None
    names: tuple[str, ...] = ()  # what the edit permission is asked for (paths.Target.names)


class ApplyPatch:
    name = "apply_patch"
    description = DESCRIPTION
    parameters = schema(
        {"patchText": {"type": "string", "description": "The full patch text that describes all changes to be made"}},
        ["patchText"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        text = args.get("patchText")
        if not isinstance(text, str) or not text:
            raise ToolError("patchText is required")
        try:
            sections = parse(text)
        except PatchError as exc:
            raise ToolError(f"apply_patch verification failed: {exc}") from None
        if not sections:
            if text.replace("\r\n", "\n").strip() == f"{BEGIN}\n{END}":
                raise ToolError("patch rejected: empty patch")
            raise ToolError("apply_patch verification failed: no hunks found")
        changes = [await self._verify(ctx, section) for section in sections]
        root = ctx.directory.resolve()
        files, diffs = [], []
        for change in changes:
            diff = unified_patch(str(change.path), change.before, change.after)
            diffs.append(diff)
            added = sum(1 for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++"))
            removed = sum(1 for x in diff.splitlines() if x.startswith("-") and not x.startswith("---"))
            files.append(
                {
                    "filePath": str(change.path),
                    "relativePath": relative(change.move_to or change.path, root),
                    "type": change.kind,
                    "patch": diff,
                    "additions": added,
                    "deletions": removed,
                    **({"movePath": str(change.move_to)} if change.move_to else {}),
                }
            )
        patterns = list(dict.fromkeys(name for change in changes for name in change.names))
        diff = "\n".join(diffs)
        await ctx.ask("edit", patterns, ["*"], {"filepath": ", ".join(patterns), "diff": diff, "files": files})
        summary = []
        for change in changes:
            await asyncio.to_thread(_write, change)
            target = change.move_to or change.path
            if change.kind != "delete":
                ctx.services.files.edited(ctx.session, target)
            summary.append(
                f"{'A' if change.kind == 'add' else 'D' if change.kind == 'delete' else 'M'} {relative(target, root)}"
            )
        output = "Success. Updated the following files:\n" + "\n".join(summary)
        written = [change.move_to or change.path for change in changes if change.kind != "delete"]
        checked = await after_write(ctx, written)
        for path in written:  # as OpenCode, the title carries them too
            output += errors(path, checked, f"\n\nLSP errors detected in {relative(path, root)}, please fix:\n")
        return ToolResult(
            output, title=output, metadata={"diff": diff, "files": files, "diagnostics": checked.diagnostics}
        )

    async def _verify(self, ctx: ToolContext, section: Section) -> _Change:
        found = await target(ctx, section.path)
        path = found.path
        if section.kind == "add":
            if path.is_dir():
                raise ToolError(f"apply_patch verification failed: Path is a directory: {path}")
            return _Change("add", path, "", section.content, names=found.names)
        if not path.is_file():
            verb = "delete" if section.kind == "delete" else "update"
            raise ToolError(f"apply_patch verification failed: Failed to read file to {verb}: {path}")
        before = await asyncio.to_thread(read_text, path)
        if section.kind == "delete":
            return _Change("delete", path, before, "", names=found.names)
        try:
            after = apply_chunks(str(path), before, section.chunks) if section.chunks else before
        except PatchError as exc:
            raise ToolError(f"apply_patch verification failed: {exc}") from None
        if section.move_to is None:
            return _Change("update", path, before, after, names=found.names)
        destination = await target(ctx, section.move_to)
        names = (*found.names, *destination.names)
        return _Change("move", path, before, after, destination.path, names)


def _write(change: _Change) -> None:
    if change.kind == "delete":
        change.path.unlink()
        return
    target = change.move_to or change.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(change.after, encoding="utf-8")
    if change.move_to and change.move_to != change.path:
        change.path.unlink()
