"""Language servers installed on demand from npm, as OpenCode installs them: each package into
its own directory of the cache (``$XDG_CACHE_HOME/opensession/packages/<package>``) with the
``npm`` found on PATH, once; later starts use the installed program.

Blocking (an install takes seconds to minutes): called on a thread, one install per package at
a time (a lock per package), bounded by ``INSTALL_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path

from platformdirs import user_cache_dir

from app.processes import find_program, tied

log = logging.getLogger("opensession.lsp")

INSTALL_TIMEOUT_SECONDS = 300
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def packages_directory(env: dict[str, str]) -> Path:
    cache = env.get("XDG_CACHE_HOME")
    return (Path(cache) / "opensession" if cache else Path(user_cache_dir("opensession"))) / "packages"


def npm_program(package: str, program: str, env: dict[str, str]) -> str | None:
    """``program`` of npm ``package``, installed into the cache first if it is not there yet;
    None if npm is missing or the install failed (logged)."""
    prefix = packages_directory(env) / package.replace("/", "+")
    binary = prefix / "node_modules" / ".bin" / program
    if binary.is_file():
        return str(binary)
    npm = find_program("npm", env)
    if npm is None:
        return None
    with _guard:
        lock = _locks.setdefault(package, threading.Lock())
    with lock:
        if binary.is_file():
            return str(binary)
        prefix.mkdir(parents=True, exist_ok=True)
        log.info("installing %s from npm into %s", package, prefix)
        argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), package]
        try:
            done = subprocess.run(
                tied(argv, env), env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SECONDS, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("could not install %s from npm: %s", package, exc)
            return None
        if done.returncode != 0:
            log.warning("could not install %s from npm: %s", package, done.stderr.strip()[-500:])
            return None
    return str(binary) if binary.is_file() else None
