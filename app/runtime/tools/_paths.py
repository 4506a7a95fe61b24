"""Confinement: a tool only touches paths inside the session's directory. ``..``, absolute paths
elsewhere and symlinks resolving outside are refused unless the ``external_directory``
permission allows that path (its default is ``ask``)."""

from __future__ import annotations

from pathlib import Path

from app.runtime.tools._base import ToolContext


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if inside(path, root) else str(path)


async def resolve(ctx: ToolContext, raw: str) -> Path:
    """The real path ``raw`` names (symlinks followed), after the confinement check."""
    root = ctx.directory.resolve()
    candidate = Path(raw).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    resolved = candidate.resolve(strict=False)
    if not inside(resolved, root):
        folder = resolved if resolved.is_dir() else resolved.parent
        pattern = str(folder).rstrip("/") + "/*"
        await ctx.ask("external_directory", [pattern], [pattern], {"filepath": str(resolved), "parentDir": str(folder)})
    return resolved
