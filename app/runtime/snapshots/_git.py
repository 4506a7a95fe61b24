"""Running ``git`` for the shadow repositories (blocking: callers run in a worker thread), with
its environment stripped of ``GIT_*`` variables (so a caller's ``GIT_DIR`` or ``GIT_INDEX_FILE``
can never point a snapshot at the user's own repository), and the options every snapshot command
needs.

A missing ``git`` executable is not an error of any one command: ``GitMissing`` tells the
service to switch snapshots off (with one warning) and keep serving."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from app.processes import tied

# Byte-exact content and paths: no line-ending conversion, no quoting of non-ASCII names,
# symlinks kept as links, no file-system monitor daemons started on the user's tree.
OPTIONS = (
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.longpaths=true",
    "-c",
    "core.fsmonitor=false",
    "--literal-pathspecs",
)


class GitMissing(RuntimeError):
    """No usable ``git`` executable."""


class OutOfTime(Exception):
    """A step that moves files was not begun because the time it was given (what was sure to
    remain of the lease it runs under) had run out."""


@dataclass(frozen=True, slots=True)
class Result:
    code: int
    out: bytes
    err: bytes

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", errors="replace")


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def git(*args: str, cwd: str, stdin: bytes | None = None) -> Result:
    """Run ``git OPTIONS args`` in ``cwd``, tied to the server's life (a killed server leaves no
    git working on the user's files); never raises for a non-zero exit (callers decide)."""
    env = _environment()
    try:
        command = tied(["git", *OPTIONS, *args], env)
        done = subprocess.run(command, cwd=cwd, env=env, input=stdin, capture_output=True, check=False)
    except FileNotFoundError as exc:
        if not os.path.isdir(cwd):
            return Result(128, b"", f"no such directory: {cwd}".encode())
        raise GitMissing(str(exc)) from exc
    except PermissionError as exc:
        raise GitMissing(str(exc)) from exc
    return Result(done.returncode, done.stdout, done.stderr)
