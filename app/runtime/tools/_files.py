"""File tools: read, write, edit, list, glob, grep. Paths go through ``paths.resolve``
(confinement); read, write and edit ask their permission under every name ``paths.target`` gives
the file (as given and where symlinks lead); writes and edits ask the ``edit`` permission and
announce the file they changed (the step's snapshots record the change itself)."""

from __future__ import annotations

import asyncio
import difflib
import mimetypes
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from app.providers.media import data_url, is_media
from app.runtime.errors import RuntimeFailure
from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema, truncate
from app.runtime.tools._checks import Checked, after_write, after_write_output, errors, warm
from app.runtime.tools._paths import Target, relative, resolve, target

T = TypeVar("T")

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_RESULTS = 100
MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024  # an image or PDF read or attached


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"Cannot read binary file: {path}")
    return data.decode("utf-8", errors="replace")


def attachment(path: Path, mime: str) -> dict[str, Any]:
    """``path`` as a file part with a data URL (how images and PDFs reach the model), refused
    beyond ``MAX_ATTACHMENT_BYTES``."""
    size = path.stat().st_size
    if size > MAX_ATTACHMENT_BYTES:
        raise ToolError(
            f"File is too large to attach ({size} bytes, the limit is {MAX_ATTACHMENT_BYTES >> 20} MB): {path}"
        )
    return {"type": "file", "mime": mime, "url": data_url(mime, path.read_bytes())}


def _media_type(path: Path) -> str | None:
    """The type of an image or PDF the read tool returns as an attachment (SVG is text)."""
    mime = mimetypes.guess_type(path.name)[0] or ""
    return mime if is_media(mime) and mime != "image/svg+xml" else None


def read_path(path: Path, offset: int = 1, limit: int = DEFAULT_READ_LINES) -> ToolResult:
    """What reading ``path`` shows the model: a directory's entries, an image or PDF as an
    attachment (as OpenCode's read tool), else the numbered lines from ``offset``. Blocking; also
    used for files attached to a prompt. The title is left to the caller."""
    if path.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        return ToolResult(
            f"<path>{path}</path>\n<type>directory</type>\n<entries>\n" + "\n".join(entries) + "\n</entries>"
        )
    if not path.exists():
        raise ToolError(f"File not found: {path}")
    mime = _media_type(path)
    if mime is not None:
        message = f"{'PDF' if mime == 'application/pdf' else 'Image'} read successfully"
        return ToolResult(
            message, metadata={"preview": message, "truncated": False}, attachments=[attachment(path, mime)]
        )
    lines = read_text(path).splitlines()
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
    return ToolResult(output, metadata={"preview": "\n".join(chosen[:20]), "truncated": more})


class Read:
    name = "read"
    description = (
        "Read a file (or list a directory). Lines are numbered; use offset/limit for long files. "
        "Images and PDFs are returned as attachments."
    )
    parameters = schema(
        {
            "filePath": {"type": "string", "description": "Path of the file, relative to the project or absolute"},
            "offset": {"type": "integer", "description": "Line to start from (1-based)"},
            "limit": {"type": "integer", "description": "Number of lines to read (default 2000)"},
        },
        ["filePath"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        found = await target(ctx, require(args, "filePath"))
        path = found.path
        await ctx.ask("read", list(found.names), ["*"], {"filepath": str(path)})
        offset = max(1, int(args.get("offset") or 1))
        limit = max(1, int(args.get("limit") or DEFAULT_READ_LINES))
        result = await asyncio.to_thread(read_path, path, offset, limit)
        result.title = relative(path, ctx.directory.resolve())
        if not result.attachments and path.is_file():
            warm(ctx, path)
        return result


def unified_patch(name: str, before: str, after: str) -> str:
    """A full unified diff (with ---/+++ headers and @@ hunks), as OpenCode clients render it."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile=name, tofile=name
        )
    )


async def _ask_edit(ctx: ToolContext, found: Target, before: str, after: str) -> tuple[str, str]:
    """Ask the ``edit`` permission for every name of ``found``, showing the change; returns (the
    real path's relative name, patch)."""
    patch = unified_patch(str(found.path), before, after)
    await ctx.ask("edit", list(found.names), ["*"], {"filepath": str(found.path), "diff": patch})
    return relative(found.path, ctx.directory.resolve()), patch


def _edit_metadata(path: Path, patch: str, before: str, after: str, checked: Checked) -> dict[str, Any]:
    additions = sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    deletions = sum(1 for line in patch.splitlines() if line.startswith("-") and not line.startswith("---"))
    return {
        "diff": patch,
        "diagnostics": checked.diagnostics,
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
        found = await target(ctx, require(args, "filePath"))
        path = found.path
        if path.is_dir():
            raise ToolError(f"Path is a directory: {path}")
        existed = path.exists()
        before = await asyncio.to_thread(read_text, path) if existed else ""
        rel, _patch = await _ask_edit(ctx, found, before, content)
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_text, content, encoding="utf-8")
        ctx.services.files.edited(ctx.session, path)
        checked = await after_write(ctx, [path])
        metadata = {"filepath": str(path), "exists": existed, "diagnostics": checked.diagnostics}
        return ToolResult("Wrote file successfully." + after_write_output(path, checked), title=rel, metadata=metadata)


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
        found = await target(ctx, require(args, "filePath"))
        path = found.path
        if not path.is_file():
            raise ToolError(f"File not found: {path}")
        text = await asyncio.to_thread(read_text, path)
        count = text.count(old) if old else 0
        if count == 0:
            raise ToolError("oldString not found in content")
        if count > 1 and not args.get("replaceAll"):
            raise ToolError(
                f"Found {count} matches for oldString. Provide more surrounding lines in oldString to "
                "identify the correct match, or set replaceAll."
            )
        updated = text.replace(old, new) if args.get("replaceAll") else text.replace(old, new, 1)
        rel, patch = await _ask_edit(ctx, found, text, updated)
        await asyncio.to_thread(path.write_text, updated, encoding="utf-8")
        ctx.services.files.edited(ctx.session, path)
        checked = await after_write(ctx, [path])
        if path in checked.formatted:  # the diff shows what the file now holds
            updated = await asyncio.to_thread(read_text, path)
            patch = unified_patch(str(path), text, updated)
        output = "Edit applied successfully." + errors(path, checked)
        return ToolResult(output, title=rel, metadata=_edit_metadata(path, patch, text, updated, checked))


# Directories the list tool leaves out besides what is ignored (OpenCode's list: build output,
# caches, virtualenvs, editor folders).
LIST_SKIPPED = (
    "node_modules/",
    "__pycache__/",
    ".git/",
    "dist/",
    "build/",
    "target/",
    "vendor/",
    "bin/",
    "obj/",
    ".idea/",
    ".vscode/",
    ".zig-cache/",
    "zig-out",
    ".coverage",
    "coverage/",
    "tmp/",
    "temp/",
    ".cache/",
    "cache/",
    "logs/",
    ".venv/",
    "venv/",
    "env/",
)


async def _search_root(ctx: ToolContext, raw: str | None) -> Path:
    root = await resolve(ctx, raw or ".")
    if not root.exists():
        raise ToolError(f"Search path not found: {raw or root}")
    return root


def _tree(root: Path, files: list[str]) -> str:
    """OpenCode's list output: the root, then each directory (sub-directories first, indented two
    spaces a level) with its files, both sorted."""
    children: dict[str, set[str]] = {}
    names: dict[str, list[str]] = {}
    for file in files:
        folder, _, name = file.rpartition("/")
        names.setdefault(folder, []).append(name)
        while folder:
            parent = folder.rpartition("/")[0]
            children.setdefault(parent, set()).add(folder)
            folder = parent
    lines = [f"{root}/"]

    def render(folder: str, depth: int) -> None:
        if folder:
            lines.append("  " * depth + folder.rpartition("/")[2] + "/")
        for child in sorted(children.get(folder, ())):
            render(child, depth + 1)
        lines.extend("  " * (depth + 1) + name for name in sorted(names.get(folder, [])))

    render("", 0)
    return "\n".join(lines) + "\n"


class List:
    name = "list"
    description = "List the files under a directory (default: the project), skipping ignored, VCS and build folders."
    parameters = schema(
        {
            "path": {"type": "string", "description": "The directory to list (default: the project)"},
            "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns to leave out"},
        },
        [],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        root = await _search_root(ctx, args.get("path"))
        if not root.is_dir():
            raise ToolError(f"Not a directory: {root}")
        # Under its own permission, as in OpenCode until 1.14: no model is offered it any more
        # (the registry), so a rule denying ``list`` holds only here.
        await ctx.ask("list", [str(root)], ["*"], {"path": str(root)})
        extra = [g for g in args.get("ignore") or [] if isinstance(g, str)]
        globs = [f"!{p}*" for p in LIST_SKIPPED] + [f"!{g}" for g in extra]
        files = await _engine(ctx.services.workspace.files(str(ctx.directory), root, globs))
        shown = sorted(str(p.relative_to(root)) for p in files)[:MAX_RESULTS]
        return ToolResult(
            _tree(root, shown),
            title=relative(root, ctx.directory.resolve()),
            metadata={"count": len(shown), "truncated": len(files) > MAX_RESULTS},
        )


async def _engine(work: Awaitable[T]) -> T:
    """The workspace's failures (a bad pattern, ripgrep missing) go back to the model."""
    try:
        return await work
    except RuntimeFailure as exc:
        raise ToolError(exc.message) from exc


class Glob:
    name = "glob"
    description = "Find files by glob pattern (e.g. **/*.py), newest first."
    parameters = schema({"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"])

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        pattern = require(args, "pattern")
        root = await _search_root(ctx, args.get("path"))
        files = await _engine(ctx.services.workspace.files(str(ctx.directory), root, [pattern]))

        def newest_first() -> list[Path]:
            def mtime(path: Path) -> float:
                try:
                    return path.stat().st_mtime
                except OSError:
                    return 0.0

            return sorted(files[:MAX_RESULTS], key=mtime, reverse=True)

        hits = await asyncio.to_thread(newest_first)
        truncated = len(files) > MAX_RESULTS
        output = "\n".join(str(p) for p in hits) if hits else "No files found"
        if truncated:
            output += "\n\n(Results are truncated. Consider using a more specific path or pattern.)"
        return ToolResult(
            output,
            title=relative(root, ctx.directory.resolve()),
            metadata={"count": len(hits), "truncated": truncated},
        )


class Grep:
    name = "grep"
    description = "Search file contents with a regular expression; include filters files by glob (e.g. *.py)."
    parameters = schema(
        {"pattern": {"type": "string"}, "path": {"type": "string"}, "include": {"type": "string"}},
        ["pattern"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        pattern = require(args, "pattern")
        root = await _search_root(ctx, args.get("path"))
        include = args.get("include") if isinstance(args.get("include"), str) else None
        hits, more = await _engine(
            ctx.services.workspace.grep(str(ctx.directory), root, pattern, include=include, limit=MAX_RESULTS)
        )
        if not hits:
            return ToolResult("No files found", title=pattern, metadata={"matches": 0, "truncated": False})
        lines = [f"Found {len(hits)} matches" + (" (more matches available)" if more else "")]
        current: Path | None = None
        for path, match in hits:
            if path != current:
                if current is not None:
                    lines.append("")
                lines.append(f"{path}:")
                current = path
            lines.append(f"  Line {match.line_number}: {match.text.rstrip(chr(10))[:MAX_LINE_CHARS]}")
        if more:
            lines += ["", "(Results truncated. Consider using a more specific path or pattern.)"]
        output, cut = truncate("\n".join(lines))
        return ToolResult(output, title=pattern, metadata={"matches": len(hits), "truncated": more or cut})
