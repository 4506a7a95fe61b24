"""Confinement: every workspace path is resolved (symlinks followed) and must land inside the
project directory. ``..``, absolute paths elsewhere and symlinks leading out are refused before
anything is read."""

from __future__ import annotations

from pathlib import Path

from app.runtime.errors import InvalidInput, PathOutside


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def confine(root: Path, raw: str, *, field: str = "path") -> Path:
    """The real path ``raw`` names, relative to ``root`` unless absolute. ``root`` is resolved."""
    if "\0" in raw:
        raise InvalidInput(f"{field} must not contain NUL characters", kind="Query", field=field)
    candidate = Path(raw).expanduser() if raw.startswith("~") else Path(raw)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve(strict=False)
    if not inside(resolved, root):
        raise PathOutside(raw)
    return resolved


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes ('' for the root itself)."""
    return "" if path == root else path.relative_to(root).as_posix()
