"""A terminal's keeper: the process that owns one pty and the program on it, so the terminal can
outlive the server process that made it (a restart, a crash) and be taken up by the next one.

Run by path (``python -I -S keeper.py``, standard library only: it starts in tens of
milliseconds; the server keeps one started ahead of need), detached in a session of its own,
with a Unix socket as its stdin that the creating server holds. Protocol, newline-delimited
JSON:
- the server sends the spec ``{command, args, cwd, env, socket, orphanSeconds}``;
- the keeper starts the program on a new pty, listens on ``socket`` and answers every server it
  is attached to with ``{pid, exit, pending}`` and the pty's master fd (SCM_RIGHTS), then the
  ``pending`` bytes of output it read while no server was attached; or ``{error}``;
- the server reads and writes the master itself; the keeper sends ``{exit}`` when the program
  exits, and ends the program's whole session on ``end`` (then exits).

One server at a time is attached: another that connects is told ``{busy: true}``. While none is,
the keeper reads the output itself (the last ``PENDING_LIMIT`` bytes are kept for the next
server) and, after ``orphanSeconds`` without one, ends the session and exits: a terminal never
outlives its server by more than that. A connection from another user is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from contextlib import suppress
from pathlib import Path

DEFAULT_ROWS, DEFAULT_COLS = 24, 80
GRACE_SECONDS = 1.0  # between SIGHUP/SIGTERM and SIGKILL
PENDING_LIMIT = 256 * 1024
TICK_SECONDS = 0.1  # how often the program's exit and the orphan deadline are looked at
_PROC = Path("/proc")


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:
    """In the child, after ``setsid``: the pty (its stdin) becomes its controlling terminal, so
    job control, ``^C`` and SIGWINCH work."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _session_members(session_id: int) -> set[int]:
    """Living (not zombie) pids whose session is ``session_id``, from Linux ``/proc``."""
    members = set()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def _remaining(leader: int) -> set[int]:
    """What is left of the session: its processes where ``/proc`` tells, else the leader's
    process group (signalled as a whole). Why a session and not a group: a shell with job control
    puts each background job in a group of its own."""
    if (_PROC / "self" / "stat").exists():
        return _session_members(leader)
    try:
        os.killpg(leader, 0)
    except (ProcessLookupError, PermissionError):
        return set()
    return {-leader}


def _signal(targets: set[int], sig: signal.Signals) -> None:
    for pid in targets:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Keeper:
    """Invariants: at most one server is ``attached``; while none is, the keeper reads the pty
    itself; ``code`` is the program's return code once it has ended, and the attached server is
    told it once."""

    def __init__(self, program: subprocess.Popen[bytes], master: int, listener: socket.socket, orphan_s: float) -> None:
        self.program = program
        self.master: int | None = master
        self.listener = listener
        self.orphan_s = orphan_s
        self.attached: socket.socket | None = None
        self.alone_since = time.monotonic()
        self.pending = bytearray()
        self.code: int | None = None
        self.told_exit = False

    def run(self) -> None:
        """Serve until told to end, or until nobody took the terminal up in time (or could)."""
        while True:
            self._look_at_program()
            alone = self.attached is None
            if alone and (time.monotonic() - self.alone_since >= self.orphan_s or self._nothing_to_hand()):
                self.end()
                return
            watched = [self.listener.fileno(), *([self.attached.fileno()] if self.attached else [])]
            if self.attached is None and self.master is not None:
                watched.append(self.master)  # nobody reads it: keep what it says for the next one
            readable, _, _ = select.select(watched, [], [], TICK_SECONDS)
            if self.listener.fileno() in readable:
                self._accept()
            if self.attached is not None and self.attached.fileno() in readable and self._heard() == "end":
                self.end()
                return
            if self.master is not None and self.master in readable and self.attached is None:
                self._keep_output()

    def _look_at_program(self) -> None:
        if self.code is None:
            self.code = self.program.poll()
        if self.code is not None and self.attached is not None and not self.told_exit:
            self.told_exit = self._send({"exit": self.code})

    def _nothing_to_hand(self) -> bool:
        """The program exited and its last output was read: no server could take anything up."""
        return self.code is not None and self.master is None and not self.pending

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        uid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.getuid():
            connection.close()
        elif self.attached is not None:
            with suppress(OSError):
                connection.sendall(b'{"busy": true}\n')
            connection.close()
        else:
            self.attach(connection)

    def attach(self, connection: socket.socket) -> None:
        """Hand the pty to a server: its master fd, and the output nobody read yet."""
        if self.master is None:  # its program exited and its output was read: nothing to hand
            connection.close()
            return
        hello = json.dumps({"pid": self.program.pid, "exit": self.code, "pending": len(self.pending)})
        try:
            socket.send_fds(connection, [hello.encode() + b"\n"], [self.master])
            connection.sendall(bytes(self.pending))
        except OSError:
            connection.close()
            return
        self.pending.clear()
        self.attached = connection
        self.told_exit = self.code is not None

    def _heard(self) -> str | None:
        """The server's word: ``end``, or None (it went away: wait for the next one)."""
        assert self.attached is not None
        try:
            data = self.attached.recv(4096)
        except OSError:
            data = b""
        if b"end" in data:
            return "end"
        if not data:
            self.attached.close()
            self.attached = None
            self.alone_since = time.monotonic()
        return None

    def _keep_output(self) -> None:
        assert self.master is not None
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # no process holds the pty any more
            os.close(self.master)
            self.master = None
            return
        self.pending += data
        del self.pending[: max(0, len(self.pending) - PENDING_LIMIT)]

    def _send(self, message: dict[str, object]) -> bool:
        assert self.attached is not None
        try:
            self.attached.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            return False
        return True

    def end(self) -> None:
        """End every process of the program's session (hang up, then SIGTERM; SIGKILL what is
        left after the grace), tell the server how it ended, and go."""
        leader = self.program.pid
        targets = _remaining(leader) | {-leader}
        for sig in (signal.SIGHUP, signal.SIGTERM):
            _signal(targets, sig)
        deadline = time.monotonic() + GRACE_SECONDS
        while _remaining(leader) and time.monotonic() < deadline:
            time.sleep(0.02)
            self.program.poll()
        _signal(_remaining(leader) | {-leader}, signal.SIGKILL)
        self.code = self.program.wait()
        if self.attached is not None and not self.told_exit:
            self._send({"exit": self.code})
        with suppress(OSError):
            os.unlink(self.listener.getsockname())


def _listen(path: str) -> socket.socket:
    with suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(8)
    return listener


def main() -> int:
    control = socket.socket(fileno=0)
    line = control.makefile("rb").readline()
    if not line:
        return 0  # started ahead of need, and not needed: the server stopped
    spec = json.loads(line)
    master, slave = os.openpty()
    try:
        set_size(slave, DEFAULT_ROWS, DEFAULT_COLS)
        program = subprocess.Popen(
            [spec["command"], *spec["args"]],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=spec["cwd"],
            env=spec["env"],
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        control.sendall(json.dumps({"error": getattr(exc, "strerror", None) or str(exc)}).encode() + b"\n")
        return 1
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    keeper = Keeper(program, master, _listen(spec["socket"]), float(spec["orphanSeconds"]))
    keeper.attach(control)
    keeper.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
