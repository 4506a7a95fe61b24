"""Child processes that die with the server. A ``kill -9`` leaves the server no moment to stop
what it started, so the kernel is asked to: on Linux a child is started through util-linux's
``setpriv --pdeathsig KILL``, which has the kernel send it SIGKILL once the thread that started
it is gone (all of them are, when the server dies), and then runs the program itself in the same
process. Dearer ways would be a ``preexec_fn`` (it makes every spawn a full ``fork`` of the
server: ten times slower with a large heap) or a supervisor process.

``tied`` ties only the child itself, not what it starts in turn. ``tied_group`` ties a whole
process group (a shell command and whatever it puts in the background) through a small ``sh``
guard: the guard is the tied child, the kernel sends it SIGUSR2 instead of SIGKILL, and the guard
kills its group (``kill -KILL 0``), so the caller must start it with ``start_new_session``. What
leaves the group on purpose (``setsid``, a daemon) is beyond it. Without ``setpriv`` (not Linux,
or no util-linux) children start untied, with one warning.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from functools import cache

log = logging.getLogger("opensession.processes")


@cache
def _setpriv(path: str) -> str | None:
    """``setpriv`` on ``path`` if it can tie a child (``--pdeathsig`` came with util-linux 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    found = shutil.which("setpriv", path=path)
    probe = [found, "--pdeathsig", "KILL", "--", found, "--version"] if found else None
    if probe is None or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        log.warning("setpriv (util-linux 2.33+) is missing: a killed server may leave its children running")
        return None
    return found


def _locate(argv: Sequence[str], env: Mapping[str, str] | None) -> tuple[str, str | None]:
    """``argv``'s program and ``setpriv``, both looked up on ``env``'s PATH (the server's by
    default). A missing program raises FileNotFoundError as starting it untied would, not an
    exit status of ``setpriv``'s."""
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    program = shutil.which(argv[0], path=path)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
    return program, _setpriv(path)


def tied(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line that starts ``argv`` tied to the server's life."""
    program, setpriv = _locate(argv, env)
    return [program, *argv[1:]] if setpriv is None else [setpriv, "--pdeathsig", "KILL", "--", program, *argv[1:]]


def shell_child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child whose stdin is a pipe the event loop made. uvloop makes such pipes
    socket pairs, and bash, given a socket on its stdin at shell level 1 (started by no shell:
    a server under systemd), takes itself for a remote shell and reads ~/.bashrc. What that
    prints would corrupt a stdio MCP server's stream, and a ``pyenv init`` there held one start
    for a minute. A shell level of at least 1, as under any shell, keeps bash from it."""
    level = env.get("SHLVL", "")
    return {**env, "SHLVL": level if level.isdigit() and int(level) >= 1 else "1"}


def keep_inherited_descriptors_from_children() -> None:
    """Mark every descriptor this process inherited beyond stdio close-on-exec. Python opens its
    own that way, but what a parent left open (a shell's or supervisor's stray descriptors) stays
    inheritable, and uvloop's spawn has no ``close_fds``: it would reach every shell command, MCP
    and language server the server starts, which could then read or hold it open. Called once,
    before the server starts anything."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # no procfs (not Linux): every inherited descriptor stays as it was
        return
    for name in names:
        fd = int(name)
        if fd > 2:
            with suppress(OSError):  # the listing's own descriptor, closed by now
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)


# The guard runs "$@" in the background and waits for it, since a shell runs a trap only between
# commands and ``wait`` is one it interrupts. It answers SIGTERM by waiting on (so a group-wide
# SIGTERM reaches the command, and the guard outlives it); it exits with the command's status.
# The background command gets its stdin back (through fd 3: a POSIX shell gives an asynchronous
# command /dev/null before its own redirections) and the default SIGINT/SIGQUIT (which it ignores).
_GROUP_GUARD = """trap 'kill -KILL 0' USR2
trap : TERM
exec 3<&0
(trap - INT QUIT; exec "$@" <&3 3<&-) &
child=$!
while wait "$child"; status=$?; kill -0 "$child" 2>/dev/null; do :; done
exit "$status"
"""


def tied_group(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line that starts ``argv`` so that the server's death kills its whole process
    group; start it with ``start_new_session=True``. The exit status is the command's (a command
    ended by a signal exits 128 + its number, as in a shell)."""
    program, setpriv = _locate(argv, env)
    if setpriv is None:
        return [program, *argv[1:]]
    guard = ["/bin/sh", "-c", _GROUP_GUARD, "opensession-guard"]
    return [setpriv, "--pdeathsig", "USR2", "--", *guard, program, *argv[1:]]


EXIT_POLL_S = 0.05
OUTPUT_GRACE_S = 0.1  # once a shell has exited, for its last output to be read


async def shell_exit(process: asyncio.subprocess.Process, reading: asyncio.Task[None]) -> None:
    """Until the shell ``process`` has exited and ``reading`` (the task reading its output) has
    ended. What the shell started in the background may hold the output open after it exits (a
    server started with ``&``): then only what is in the pipe is waited for
    (``OUTPUT_GRACE_S``), and the background process runs on, as OpenCode's shell calls end. A
    failure of ``reading`` is raised. On Python 3.11 ``process.wait()`` also waits for every
    holder of the output to close it (3.12 returns at the exit), so the exit is polled."""

    async def exited() -> None:
        while process.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)

    exit_seen = asyncio.ensure_future(exited())
    try:
        await asyncio.wait({reading, exit_seen}, return_when=asyncio.FIRST_COMPLETED)
        if reading.done():  # the output ended: the exit follows, or has come
            reading.result()
            await process.wait()
            return
    finally:
        exit_seen.cancel()
    await asyncio.wait({reading}, timeout=OUTPUT_GRACE_S)
    if reading.done():
        reading.result()


_READING_ON: set[asyncio.Task[None]] = set()


def read_on(reading: asyncio.Task[None]) -> None:
    """Keep ``reading`` (of a shell's output, once nobody waits for it) until the output ends,
    so what runs on never blocks on a full pipe. A failure of it was its caller's to raise, or
    its caller failed first: it is marked seen, not logged as never retrieved."""

    def ended(task: asyncio.Task[None]) -> None:
        _READING_ON.discard(task)
        if not task.cancelled():
            task.exception()

    _READING_ON.add(reading)
    reading.add_done_callback(ended)


@cache
def _own_scripts() -> str:
    """The directory of the server's own interpreter's scripts (its virtualenv's ``bin``)."""
    return os.path.dirname(sys.executable)


def find_program(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """``name`` on PATH, else beside the server's interpreter: a program installed with the
    server (``pip install`` into its virtualenv: ruff, basedpyright) is found even where that
    virtualenv is not activated."""
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    return shutil.which(name, path=path) or shutil.which(name, path=_own_scripts())
