"""The operating-system side of a terminal: a pseudo-terminal pair, a process that leads its own
session with the pty as its controlling terminal, window sizes, and ending everything the
session started.

Why a session and not only a process group: an interactive shell with job control puts each
background job in a process group of its own, so killing the shell's group would leave
``sleep 1000 &`` running. Every process the terminal started shares the leader's session id
(unless it called ``setsid`` itself), so ending the session finds them all."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

DEFAULT_ROWS, DEFAULT_COLS = 24, 80
GRACE_SECONDS = 1.0  # between SIGHUP/SIGTERM and SIGKILL


def set_size(fd: int, rows: int, cols: int) -> None:
    """Set the window size; the kernel signals SIGWINCH to the foreground job."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:
    """In the child, after ``setsid``: make the pty (its stdin) the controlling terminal, so job
    control, ``^C`` and SIGWINCH work."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def spawn(command: str, args: Sequence[str], cwd: str, env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``command`` on a new pty; returns the process and the non-blocking master fd.
    Raises ``OSError`` (no such command, not executable) or ``ValueError`` (NUL in an argument).

    The stdlib ``Popen`` and not the event loop's subprocess support: uvloop runs ``preexec_fn``
    before ``setsid``, when the child cannot take a controlling terminal yet."""
    master, slave = os.openpty()
    try:
        set_size(slave, DEFAULT_ROWS, DEFAULT_COLS)
        process = subprocess.Popen(
            [command, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return process, master


def exited(process: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """Resolves with the return code once ``process`` exits (and is reaped). A thread per process
    waits for it: portable, and it does not compete with the loop's own child watching."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    def settle(code: int) -> None:
        if not future.done():
            future.set_result(code)

    def wait() -> None:
        code = process.wait()
        with suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle, code)

    threading.Thread(target=wait, name=f"pty-wait:{process.pid}", daemon=True).start()
    return future


def exit_code(returncode: int) -> int:
    """OpenCode reports a non-negative code: a death by signal N is the shell's 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


_PROC = Path("/proc")


def _session_members(session_id: int) -> list[int]:
    """Living (not zombie) pids whose session is ``session_id``, from Linux ``/proc``."""
    members = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _remaining(leader: int) -> set[int]:
    """What is left of the terminal: its session's processes where ``/proc`` tells, else the
    leader's process group (signalled as a whole)."""
    if (_PROC / "self" / "stat").exists():
        return set(_session_members(leader))
    try:
        os.killpg(leader, 0)
    except (ProcessLookupError, PermissionError):
        return set()
    return {-leader}


def _signal(targets: set[int], sig: signal.Signals) -> None:
    for pid in targets:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def end_session(leader: int, grace: float = GRACE_SECONDS) -> None:
    """Hang up the session (SIGHUP, as a closed terminal does, then SIGTERM), wait up to ``grace``
    seconds, then SIGKILL whatever is left. The leader's group is signalled too, so a child
    caught between fork and exec is not missed."""
    targets = _remaining(leader) | {-leader}
    for sig in (signal.SIGHUP, signal.SIGTERM):
        _signal(targets, sig)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        await asyncio.sleep(0.02)
        if not _remaining(leader):
            return
    _signal(_remaining(leader) | {-leader}, signal.SIGKILL)
