"""File tools: read, write, edit, list, glob, grep. Paths go through ``paths.resolve``
(confinement); writes and edits ask the ``edit`` permission and announce the file they changed
(the step's snapshots record the change itself)."""

from __future__ import annotations

import asyncio
import difflib
import os
import re
from pathlib import Path
from typing import Any

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema, truncate
from app.runtime.tools._paths import relative, resolve

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_RESULTS = 100
SKIPPED_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", "dist", "build"}


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"Cannot read binary file: {path}")
    return data.decode("utf-8", errors="replace")


class Read:
    name = "read"
    description = "Read a file (or list a directory). Lines are numbered; use offset/limit for long files."
    parameters = schema(
        {
            "filePath": {"type": "string", "description": "Path of the file, relative to the project or absolute"},
            "offset": {"type": "integer", "description": "Line to start from (1-based)"},
            "limit": {"type": "integer", "description": "Number of lines to read (default 2000)"},
        },
        ["filePath"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        path = await resolve(ctx, require(args, "filePath"))
        await ctx.ask("read", [relative(path, ctx.directory.resolve())], ["*"], {"filepath": str(path)})
        if path.is_dir():
            entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
            return ToolResult(
                f"<path>{path}</path>\n<type>directory</type>\n<entries>\n" + "\n".join(entries) + "\n</entries>",
                title=relative(path, ctx.directory.resolve()),
            )
        if not path.exists():
            raise ToolError(f"File not found: {path}")
        lines = (await asyncio.to_thread(_read_text, path)).splitlines()
        offset = max(1, int(args.get("offset") or 1))
        limit = max(1, int(args.get("limit") or DEFAULT_READ_LINES))
        chosen = lines[offset - 1 : offset - 1 + limit]
        numbered = "\n".join(f"{offset + i}: {line[:MAX_LINE_CHARS]}" for i, line in enumerate(chosen))
        last = offset - 1 + len(chosen)
        more = last < len(lines)
        tail = (
            f"(File has more lines. Use offset={last + 1} to read on)"
            if more
            else f"(End of file - total {len(lines)} lines)"
        )
        output = f"<path>{path}</path>\n<type>file</type>\n<content>\n{numbered}\n\n{tail}\n</content>"
        return ToolResult(
            output,
            title=relative(path, ctx.directory.resolve()),
            metadata={"preview": "\n".join(chosen[:20]), "truncated": more},
        )


def unified_patch(name: str, before: str, after: str) -> str:
    """A full unified diff (with ---/+++ headers and @@ hunks), as OpenCode clients render it."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=name, tofile=name
        )
    )


async def _ask_edit(ctx: ToolContext, path: Path, before: str, after: str) -> tuple[str, str]:
    """Ask the ``edit`` permission showing the change; returns (relative name, patch)."""
    rel = relative(path, ctx.directory.resolve())
    patch = unified_patch(str(path), before, after)
    await ctx.ask("edit", [rel], ["*"], {"filepath": str(path), "diff": patch})
    return rel, patch


def _edit_metadata(path: Path, patch: str, before: str, after: str) -> dict[str, Any]:
    additions = sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    deletions = sum(1 for line in patch.splitlines() if line.startswith("-") and not line.startswith("---"))
    return {
        "diff": patch,
        "diagnostics": {},
        "filediff": {
            "file": str(path),
            "before": before,
            "after": after,
            "additions": additions,
            "deletions": deletions,
        },
    }


class Write:
    name = "write"
    description = "Create or overwrite a file with the given content."
    parameters = schema(
        {"filePath": {"type": "string"}, "content": {"type": "string"}},
        ["filePath", "content"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("The content parameter is required and must be a string")
        path = await resolve(ctx, require(args, "filePath"))
        if path.is_dir():
            raise ToolError(f"Path is a directory: {path}")
        existed = path.exists()
        before = await asyncio.to_thread(_read_text, path) if existed else ""
        rel, _patch = await _ask_edit(ctx, path, before, content)
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_text, content, encoding="utf-8")
        ctx.services.files.edited(ctx.session, path)
        metadata = {"filepath": str(path), "exists": existed, "diagnostics": {}}
        return ToolResult("Wrote file successfully.", title=rel, metadata=metadata)


class Edit:
    name = "edit"
    description = "Replace an exact string in a file. oldString must match exactly once unless replaceAll is set."
    parameters = schema(
        {
            "filePath": {"type": "string"},
            "oldString": {"type": "string", "description": "The exact text to replace"},
            "newString": {"type": "string", "description": "The text to put in its place"},
            "replaceAll": {"type": "boolean", "description": "Replace every occurrence"},
        },
        ["filePath", "oldString", "newString"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        old, new = args.get("oldString"), args.get("newString")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolError("oldString and newString are required strings")
        if old == new:
            raise ToolError("oldString and newString must be different")
        path = await resolve(ctx, require(args, "filePath"))
        if not path.is_file():
            raise ToolError(f"File not found: {path}")
        text = await asyncio.to_thread(_read_text, path)
        count = text.count(old) if old else 0
        if count == 0:
            raise ToolError("oldString not found in content")
        if count > 1 and not args.get("replaceAll"):
            raise ToolError(
                f"Found {count} matches for oldString. Provide more surrounding lines in oldString to "
                "identify the correct match, or set replaceAll."
            )
        updated = text.replace(old, new) if args.get("replaceAll") else text.replace(old, new, 1)
        rel, patch = await _ask_edit(ctx, path, text, updated)
        await asyncio.to_thread(path.write_text, updated, encoding="utf-8")
        ctx.services.files.edited(ctx.session, path)
        return ToolResult("Edit applied successfully.", title=rel, metadata=_edit_metadata(path, patch, text, updated))


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        found.extend(Path(current) / f for f in sorted(files))
    return found


class List:
    name = "list"
    description = "List the files under a directory (default: the project), skipping VCS and build folders."
    parameters = schema({"path": {"type": "string"}}, [])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        root = await resolve(ctx, args.get("path") or ".")
        if not root.is_dir():
            raise ToolError(f"Not a directory: {root}")
        files = await asyncio.to_thread(_walk, root)
        shown = [str(p.relative_to(root)) for p in files[:MAX_RESULTS]]
        more = f"\n(showing {MAX_RESULTS} of {len(files)} files)" if len(files) > MAX_RESULTS else ""
        return ToolResult(
            f"{root}/\n" + "\n".join(shown) + more,
            title=relative(root, ctx.directory.resolve()),
            metadata={"count": len(files), "truncated": bool(more)},
        )


class Glob:
    name = "glob"
    description = "Find files by glob pattern (e.g. **/*.py), newest first."
    parameters = schema({"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        pattern = require(args, "pattern")
        root = await resolve(ctx, args.get("path") or ".")

        def search() -> list[Path]:
            hits = [p for p in root.glob(pattern) if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(root).parts)]
            return sorted(hits, key=lambda p: p.stat().st_mtime, reverse=True)

        try:
            hits = await asyncio.to_thread(search)
        except ValueError as exc:
            raise ToolError(f"Invalid glob pattern: {exc}") from exc
        shown = [str(p) for p in hits[:MAX_RESULTS]]
        output = "\n".join(shown) if shown else "No files found"
        return ToolResult(output, title=pattern, metadata={"count": len(hits), "truncated": len(hits) > MAX_RESULTS})


class Grep:
    name = "grep"
    description = "Search file contents with a regular expression; include filters files by glob (e.g. *.py)."
    parameters = schema(
        {"pattern": {"type": "string"}, "path": {"type": "string"}, "include": {"type": "string"}},
        ["pattern"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        try:
            regex = re.compile(require(args, "pattern"))
        except re.error as exc:
            raise ToolError(f"Invalid regular expression: {exc}") from exc
        root = await resolve(ctx, args.get("path") or ".")
        include = args.get("include")

        def search() -> list[tuple[Path, int, str]]:
            hits: list[tuple[Path, int, str]] = []
            for path in _walk(root) if root.is_dir() else [root]:
                if include and not path.match(include):
                    continue
                try:
                    text = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                for number, line in enumerate(text.splitlines(), 1):
                    if regex.search(line):
                        hits.append((path, number, line[:MAX_LINE_CHARS]))
                        if len(hits) >= MAX_RESULTS:
                            return hits
            return hits

        hits = await asyncio.to_thread(search)
        if not hits:
            return ToolResult("No files found", title=regex.pattern, metadata={"matches": 0})
        lines = [f"Found {len(hits)} matches"]
        current: Path | None = None
        for path, number, line in hits:
            if path != current:
                lines.append(f"{path}:")
                current = path
            lines.append(f"  Line {number}: {line}")
        output, truncated = truncate("\n".join(lines))
        return ToolResult(output, title=regex.pattern, metadata={"matches": len(hits), "truncated": truncated})
