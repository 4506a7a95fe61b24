"""One running terminal: its keeper (``_process.Kept``: the process that owns the pty and the
program), the master side of its pty, its scrollback and the connections reading it.

Output is read by the event loop (``add_reader`` on the non-blocking master), decoded as UTF-8
across chunk boundaries, appended to the scrollback and queued to every attached connection,
all in one synchronous step: a connection attached between two chunks sees each byte exactly
once (replay up to its cursor, then live). Input is written with backpressure: a writer waits
while more than ``_INPUT_HIGH`` bytes are still pending because the program does not read."""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from app.runtime.terminals._process import END_SECONDS, Kept, exit_code, set_size
from app.runtime.terminals._scrollback import Scrollback

log = logging.getLogger("opensession.terminals")

_READ_SIZE = 64 * 1024
_INPUT_HIGH = 256 * 1024
CLOSE_NORMAL = 1000  # the terminal ended: OpenCode's app stops reconnecting on this code alone
CLOSE_GOING_AWAY = 1001  # this server stops, the terminal runs on: the client reconnects
CLOSE_LAGGING = 1013  # "try again later": the client reconnects with its cursor


@dataclass(eq=False)
class Subscription:
    """One connection's view: the output it missed up to ``cursor``, then live chunks. ``next``
    returns None once the stream is over (the process exited, the pty was removed, or the
    connection fell more than a scrollback behind); ``close_code`` says which."""

    replay: str
    cursor: int
    _queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    _pending: int = 0
    close_code: int = CLOSE_NORMAL

    async def next(self) -> str | None:
        chunk = await self._queue.get()
        if chunk is not None:
            self._pending -= len(chunk)
        return chunk

    def _push(self, chunk: str) -> None:
        self._pending += len(chunk)
        self._queue.put_nowait(chunk)

    def _end(self, code: int) -> None:
        self.close_code = code
        self._queue.put_nowait(None)


class Terminal:
    """Invariants: ``info["status"]`` is ``exited`` exactly when the program has ended and its
    last output was read; the master fd is closed once, after that, at ``close`` or ``detach``.
    ``start`` runs before anything else."""

    def __init__(
        self,
        info: dict[str, Any],
        directory: str,
        kept: Kept,
        buffer_limit: int,
        on_exit: Callable[[Terminal], None],
        cursor: int = 0,
    ) -> None:
        self.info = info
        self.directory = directory
        self._kept = kept
        self._master: int | None = kept.master
        self._scrollback = Scrollback(buffer_limit)
        self._scrollback.start = cursor  # taken up from another server: its cursors go on
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._subscribers: set[Subscription] = set()
        self._pending_input = bytearray()
        self._drained = asyncio.Event()
        self._drained.set()
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Follow the keeper, show what the program said while no server was attached, and read
        the pty from now on."""
        await self._kept.start()
        self._emit(self._decoder.decode(self._kept.pending))
        self._loop.add_reader(self._kept.master, self._read_available)
        self._watcher = asyncio.create_task(self._watch(), name=f"pty:{self.info['id']}")

    @property
    def cursor(self) -> int:
        """The position after the last output (where a server taking it up goes on from)."""
        return self._scrollback.end

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def running(self) -> bool:
        status: str = self.info["status"]
        return status == "running"

    # -- output --------------------------------------------------------------------------------

    def _read_available(self, budget: int = _READ_SIZE) -> None:
        """Read what the master has now, ``budget`` bytes per turn of the loop, so a program that
        floods its terminal does not starve the loop: past the budget the rest is read in a later
        callback (scheduled here, since a reader may be signalled only on new data). EIO means no
        process holds the pty's slave side any more."""
        while self._master is not None:
            if budget <= 0:
                self._loop.call_soon(self._read_available)
                return
            try:
                data = os.read(self._master, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._loop.remove_reader(self._master)
                return
            budget -= len(data)
            self._emit(self._decoder.decode(data))

    def _emit(self, text: str) -> None:
        if not text:
            return
        self._scrollback.append(text)
        for subscriber in list(self._subscribers):
            if subscriber._pending > self._scrollback.limit:
                self._subscribers.discard(subscriber)
                subscriber._end(CLOSE_LAGGING)
            else:
                subscriber._push(text)

    async def _watch(self) -> None:
        returncode = await self._kept.exited
        self._read_available(budget=4 * self._scrollback.limit)  # its last words, a scrollback at most
        self._emit(self._decoder.decode(b"", final=True))
        self.info["status"] = "exited"
        self.info["exitCode"] = exit_code(returncode)
        self._release()
        self._on_exit(self)
        await self._kept.end()  # what the program left behind in its session, and the keeper

    # -- connections ---------------------------------------------------------------------------

    def attach(self, cursor: int | None) -> Subscription:
        """A connection from ``cursor`` (None: from the oldest output held; -1: live only)."""
        subscription = Subscription(self._scrollback.since(0 if cursor is None else cursor), self._scrollback.end)
        if self.running:
            self._subscribers.add(subscription)
        else:
            subscription._end(CLOSE_NORMAL)
        return subscription

    def detach(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    # -- input and size ------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Send input to the program; ignored once it has exited (as OpenCode does)."""
        if self._master is None or not data:
            return
        self._pending_input += data
        self._flush_input()
        while self._master is not None and len(self._pending_input) > _INPUT_HIGH:
            self._drained.clear()
            await self._drained.wait()

    def _flush_input(self) -> None:
        if self._master is None:
            return
        try:
            written = os.write(self._master, self._pending_input)
        except BlockingIOError:
            written = 0
        except OSError:
            self._pending_input.clear()
            written = 0
        del self._pending_input[:written]
        if self._pending_input:
            self._loop.add_writer(self._master, self._flush_input)
        else:
            self._loop.remove_writer(self._master)
        if len(self._pending_input) <= _INPUT_HIGH:
            self._drained.set()

    def resize(self, rows: int, cols: int) -> None:
        if self._master is not None:
            set_size(self._master, rows, cols)

    # -- ending --------------------------------------------------------------------------------

    def _release(self, code: int = CLOSE_NORMAL) -> None:
        """Close the master and end every connection (after the output queued to it)."""
        if self._master is not None:
            self._loop.remove_reader(self._master)
            self._loop.remove_writer(self._master)
            with suppress(OSError):
                os.close(self._master)
            self._master = None
        self._drained.set()
        for subscriber in self._subscribers:
            subscriber._end(code)
        self._subscribers.clear()

    async def close(self) -> None:
        """End the terminal: its connections, its pty and every process of its session."""
        self._release()
        await self._kept.end()
        if self._watcher is not None:
            done, _ = await asyncio.wait({self._watcher}, timeout=END_SECONDS)
            if not done:  # the keeper did not say how the program ended
                self._watcher.cancel()

    def leave(self) -> None:
        """Let go of the terminal, which goes on running: the next server to start takes it up
        from its keeper (this one is stopping)."""
        if self._watcher is not None:
            self._watcher.cancel()
        self._release(CLOSE_GOING_AWAY)  # the clients reconnect, to whichever server takes it up
        self._kept.detach()
