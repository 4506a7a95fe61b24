"""Confinement: every workspace path is resolved (symlinks followed) and must land inside the
project directory. ``..``, absolute paths elsewhere and symlinks leading out are refused before
anything is read.

Paths come from clients, so the operating system's refusals of them are the client's errors, not
the server's: ``refusals`` turns them into ``PathNotFound`` (404) or ``InvalidInput`` (400, with
the system's reason: a name too long, a symlink loop, permission denied...)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.runtime.errors import InvalidInput, PathNotFound, PathOutside

_SHOWN_CHARS = 120  # of a refused path, in the message


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def real(path: Path) -> Path:
    """``path`` with symlinks followed; a symlink loop is an ``OSError`` (ELOOP) as it is from
    Python 3.13 on (before, pathlib raised ``RuntimeError``)."""
    try:
        return path.resolve(strict=False)
    except RuntimeError as exc:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from exc


def confine(root: Path, raw: str, *, field: str = "path") -> Path:
    """The real path ``raw`` names, relative to ``root`` unless absolute. ``root`` is resolved."""
    if "\0" in raw:
        raise InvalidInput(f"{field} must not contain NUL characters", kind="Query", field=field)
    candidate = Path(raw).expanduser() if raw.startswith("~") else Path(raw)
    resolved = real(candidate if candidate.is_absolute() else root / candidate)
    if not inside(resolved, root):
        raise PathOutside(raw)
    return resolved


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes ('' for the root itself)."""
    return "" if path == root else path.relative_to(root).as_posix()


@contextmanager
def refusals(raw: str) -> Iterator[None]:
    """Within: an ``OSError`` on the way to ``raw`` (the client's path) is the client's error
    naming it, 404 for what is not there, else 400 with the system's reason."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError):
        raise PathNotFound(raw) from None
    except OSError as exc:
        name = str(exc.filename or raw)
        shown = name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "..."
        raise InvalidInput(f"Cannot use {shown}: {exc.strerror or exc}", kind="Query", field="path") from None
