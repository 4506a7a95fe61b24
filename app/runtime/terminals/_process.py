"""The server's side of a terminal's process: the keeper that owns the pty and the program on it
(``keeper.py``, a process of its own, so the terminal outlives a restart or a crash of this
server), and this server's attachment to it (``Kept``): the pty's master fd, which this server
reads and writes itself, and the socket on which the keeper says how the program ended and is
told to end it.

Why a process and not the server's own child: a pty whose master closes hangs up its program,
so a terminal made by the server itself dies with the server. The keeper holds the master
across the gap and hands it, with the output of the gap, to the next server that takes it up
(``take_up``)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEEPER = str(Path(__file__).with_name("keeper.py"))
HANDSHAKE_SECONDS = 10.0  # a keeper starts in tens of milliseconds; this bounds a stuck one
END_SECONDS = 3.0  # the keeper's grace (1 s) between SIGTERM and SIGKILL, and some
HUNG_UP = -signal.SIGHUP  # how a program whose keeper vanished is taken to have ended


class SpawnFailed(Exception):
    """The keeper could not start the program (no such command, a bad directory...)."""


def set_size(fd: int, rows: int, cols: int) -> None:
    """Set the window size; the kernel signals SIGWINCH to the foreground job."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def exit_code(returncode: int) -> int:
    """OpenCode reports a non-negative code: a death by signal N is the shell's 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass(eq=False)
class Kept:
    """This server's attachment to one keeper. ``pending``: output the keeper read while no
    server was attached; ``code``: the program's return code if it had ended by then."""

    connection: socket.socket
    pid: int
    master: int
    pending: bytes
    code: int | None
    exited: asyncio.Future[int] = field(init=False)
    _listening: asyncio.Task[None] | None = field(init=False, default=None)
    _writer: asyncio.StreamWriter | None = field(init=False, default=None)

    async def start(self) -> None:
        """Follow the keeper: ``exited`` resolves with the program's return code."""
        self.exited = asyncio.get_running_loop().create_future()
        if self.code is not None:
            self.exited.set_result(self.code)
        self.connection.setblocking(False)
        reader, self._writer = await asyncio.open_unix_connection(sock=self.connection)
        self._listening = asyncio.create_task(self._listen(reader), name=f"pty-keeper:{self.pid}")

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        with suppress(OSError, ValueError):
            while line := await reader.readline():
                message = json.loads(line)
                if "exit" in message and not self.exited.done():
                    self.exited.set_result(int(message["exit"]))
        if not self.exited.done():  # the keeper is gone, the pty with it
            self.exited.set_result(HUNG_UP)

    async def end(self) -> None:
        """End the program's whole session (if it still runs, or what it left behind) and the
        keeper; returns once the keeper has, or after ``END_SECONDS``."""
        if self._writer is None or self._writer.is_closing():
            return
        with suppress(OSError):
            self._writer.write(b"end\n")
        if self._listening is not None:
            await asyncio.wait({self._listening}, timeout=END_SECONDS)
        self.detach()

    def detach(self) -> None:
        """Let go of the keeper, which waits for another server (or ends the program once
        nobody took it up in time)."""
        if self._listening is not None:
            self._listening.cancel()
        if self._writer is not None:
            self._writer.close()
        else:
            self.connection.close()


def _hello(connection: socket.socket) -> Kept | None:
    """Blocking: the keeper's answer on ``connection`` (None: busy with another server); raises
    ``SpawnFailed`` for a program that could not start, ``OSError`` for a keeper that is gone."""
    connection.settimeout(HANDSHAKE_SECONDS)
    data, fds, _flags, _address = socket.recv_fds(connection, 65536, 1)
    while b"\n" not in data:
        more = connection.recv(65536)
        if not more:
            break
        data += more
    line, _, pending = data.partition(b"\n")
    try:
        if not line:
            raise ConnectionResetError("the terminal's keeper went away")
        hello: dict[str, Any] = json.loads(line)
        if "error" in hello:
            raise SpawnFailed(str(hello["error"]))
        if "pid" not in hello or not fds:
            return None
        while len(pending) < hello["pending"]:
            more = connection.recv(65536)
            if not more:
                return None
            pending += more
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    os.set_blocking(fds[0], False)
    return Kept(connection, int(hello["pid"]), fds[0], pending, hello["exit"])


def _start_keeper() -> socket.socket:
    """Blocking: a new keeper, waiting for its spec on the returned socket (it exits if the
    socket closes first)."""
    ours, theirs = socket.socketpair()
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", KEEPER],
            stdin=theirs.fileno(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no signal meant for the server's group reaches it
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    threading.Thread(target=keeper.wait, name=f"pty-keeper-reap:{keeper.pid}", daemon=True).start()
    return ours


class Keepers:
    """Starts keepers, keeping one ready: a keeper's interpreter takes tens of milliseconds to
    start, so each terminal but the first is made by a keeper started after the one before (the
    first waits for its own). Used from the event loop only."""

    def __init__(self) -> None:
        self._ready: socket.socket | None = None
        self._starting: asyncio.Task[None] | None = None
        self._closed = False

    async def spawn(
        self, command: str, args: Sequence[str], cwd: str, env: Mapping[str, str], socket_path: str, orphan_s: float
    ) -> Kept:
        """A keeper running ``command`` on a new pty. Raises ``SpawnFailed`` or ``OSError``."""
        spec = {
            "command": command,
            "args": list(args),
            "cwd": cwd,
            "env": dict(env),
            "socket": socket_path,
            "orphanSeconds": orphan_s,
        }
        request = json.dumps(spec).encode() + b"\n"
        ready, self._ready = self._ready, None
        try:
            if ready is not None:
                with suppress(OSError):  # it died while it waited: start another
                    return await self._answer(ready, request)
            return await self._answer(await asyncio.to_thread(_start_keeper), request)
        finally:
            self._prepare()

    @staticmethod
    async def _answer(connection: socket.socket, request: bytes) -> Kept:
        kept = await asyncio.to_thread(_answered, connection, request)
        if kept is None:
            raise SpawnFailed("the terminal's keeper did not start")
        return kept

    def _prepare(self) -> None:
        if not self._closed and self._ready is None and (self._starting is None or self._starting.done()):
            self._starting = asyncio.create_task(self._start_ready(), name="terminals:keeper")

    async def _start_ready(self) -> None:
        try:
            ready = await asyncio.to_thread(_start_keeper)
        except OSError:
            return  # the next terminal starts its own
        if self._closed:
            ready.close()
        else:
            self._ready = ready

    async def close(self) -> None:
        """The ready keeper goes (its socket closes, so it exits)."""
        self._closed = True
        if self._starting is not None:
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._ready is not None:
            self._ready.close()
            self._ready = None


def take_up(socket_path: str) -> Kept | None:
    """Blocking: attach to the keeper listening at ``socket_path``. None when another server is
    attached to it; ``OSError`` when it is gone."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(HANDSHAKE_SECONDS)
    return _answered(connection, connect_to=socket_path)


def _answered(connection: socket.socket, request: bytes = b"", connect_to: str | None = None) -> Kept | None:
    """``_hello`` on ``connection`` (connected to ``connect_to`` first, ``request`` sent first);
    the connection is closed unless it attached this server to a keeper."""
    try:
        if connect_to is not None:
            connection.connect(connect_to)
        if request:
            connection.sendall(request)
        kept = _hello(connection)
    except BaseException:
        connection.close()
        raise
    if kept is None:
        connection.close()
    return kept
