"""What a create request turns into: the command line (the user's shell by default, started as a
login shell the way OpenCode does for any command whose name ends in ``sh``), the working
directory (confined to the instance directory, as the tools are) and the environment."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from app.runtime.errors import InvalidInput, TerminalForbidden
from app.runtime.workspace import real, refusals

_SHELLS_FILE = Path("/etc/shells")
_NOT_LOGIN_SHELLS = {"nologin", "false"}


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def shells() -> list[dict[str, object]]:
    """The system's shells (``/etc/shells``, in its order), as ``{path, name, acceptable}``."""
    try:
        lines = _SHELLS_FILE.read_text().splitlines()
    except OSError:
        lines = [default_shell()]
    paths = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [
        {
            "path": path,
            "name": os.path.basename(path),
            "acceptable": _executable(path) and os.path.basename(path) not in _NOT_LOGIN_SHELLS,
        }
        for path in paths
        if os.path.exists(path)
    ]


def default_shell() -> str:
    preferred = os.environ.get("SHELL", "")
    if preferred and _executable(preferred) and os.path.basename(preferred) not in _NOT_LOGIN_SHELLS:
        return preferred
    return shutil.which("bash") or "/bin/sh"


def command_line(command: str | None, args: list[str] | None) -> tuple[str, list[str]]:
    command = command or default_shell()
    argv = list(args or [])
    if command.endswith("sh"):
        argv.append("-l")
    for value in (command, *argv):
        if "\0" in value:
            raise InvalidInput("command and args must not contain NUL characters")
    return command, argv


def working_directory(directory: str, cwd: str | None) -> str:
    """The directory to start in: the instance directory, or ``cwd`` inside it (relative to it,
    or absolute). ``..``, other absolute paths and symlinks resolving outside are refused, and so
    is a path the system cannot use (a 400, as the file routes answer)."""
    with refusals(cwd or directory):
        return _working_directory(directory, cwd)


def _working_directory(directory: str, cwd: str | None) -> str:
    root_path = Path(directory)
    if not root_path.is_dir():
        raise InvalidInput(f"Directory does not exist: {directory}")
    if not cwd:
        return directory
    if "\0" in cwd:
        raise InvalidInput("cwd must not contain NUL characters")
    named = Path(os.path.normpath(root_path / cwd))  # an absolute cwd replaces the root
    resolved, root = real(named), real(root_path)
    if resolved != root and root not in resolved.parents:
        raise TerminalForbidden(f"cwd is outside the project directory {directory}: {cwd}")
    if not resolved.is_dir():
        raise InvalidInput(f"cwd is not a directory: {cwd}")
    return str(named)


def environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {**os.environ, **(extra or {}), "TERM": "xterm-256color"}
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidInput(f"Invalid environment variable: {key!r}")
    return env
