"""Confinement: a tool only touches paths inside the session's directory. ``..``, absolute paths
elsewhere and symlinks resolving outside are refused unless the ``external_directory``
permission allows that path (its default is ``ask``).

A path a tool reads or writes is checked (``read``, ``edit``) under every name it has here: the
name as given and the real path it leads to, so neither an allowed alias of a denied file nor a
denied name that is a symlink gets past a rule."""

from __future__ import annotations

import os
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Target:
    """A path a tool acts on. ``path`` is the real one (symlinks followed), what is read or
    written; ``names`` are the names permissions are checked under (project-relative when inside):
    the one given, normalised without following symlinks, then the real path's."""

    path: Path
    names: tuple[str, ...]


async def target(ctx: ToolContext, raw: str) -> Target:
    """``raw`` resolved and confined (``resolve``), with the names to check it under."""
    real = await resolve(ctx, raw)
    root = ctx.directory.resolve()
    return Target(real, tuple(dict.fromkeys((relative(_given(ctx, raw), root), relative(real, root)))))


def _given(ctx: ToolContext, raw: str) -> Path:
    """``raw`` absolute and normalised as written; a name under the session's directory as given
    is re-rooted on its real path, so the names of one file compare equal."""
    directory = Path(os.path.normpath(ctx.directory.absolute()))
    given = Path(os.path.normpath(directory / Path(raw).expanduser()))
    return ctx.directory.resolve() / given.relative_to(directory) if inside(given, directory) else given
