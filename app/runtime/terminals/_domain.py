"""The terminals of this process, by instance directory: create, read, update, remove, connect
tickets, and the ``pty.*`` events (instance events: they carry a directory, no session); taking
up the terminals a stopped or dead server of the same database left on this machine
(``_shelf.py``); in a cluster, where the other processes' terminals are (``_placement.py``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from app import ids
from app.events.model import Event
from app.runtime.errors import InvalidInput, TerminalNotFound
from app.runtime.infrastructure import Infrastructure
from app.runtime.terminals._launch import command_line, environment, working_directory
from app.runtime.terminals._placement import Alone, Elsewhere, Placement, Shared
from app.runtime.terminals._process import Keepers, SpawnFailed, take_up
from app.runtime.terminals._shelf import Shelf, Shelved
from app.runtime.terminals._terminal import Subscription, Terminal
from app.runtime.terminals._tickets import Tickets

log = logging.getLogger("opensession.terminals")

TAKE_UP_SECONDS = 1.0  # how often the shelf is looked at for terminals nobody serves
# How long a request for a terminal whose owner stopped answering waits for another process to
# take it up (one on the same machine does within ``TAKE_UP_SECONDS`` and a write), and how often
# it looks.
SUCCESSOR_WAIT_S = 3.0
SUCCESSOR_POLL_S = 0.1


class Terminals:
    """Invariant: a terminal is listed until it is removed, or, if ``keep_exited`` was false
    when it was created (legacy ``POST /pty``), until its process exits. While this server
    serves a terminal, its record on the shelf says so (its keeper is attached here)."""

    def __init__(
        self,
        publish: Callable[[Event], None],
        buffer_limit: int,
        shelf: Shelf,
        orphan_seconds: float,
        placement: Callable[[Callable[[], Iterable[Terminal]]], Placement] = lambda _held: Alone(),
    ) -> None:
        self._publish = publish
        self._buffer_limit = buffer_limit
        self._shelf = shelf
        self._orphan_seconds = orphan_seconds
        self._terminals: dict[str, Terminal] = {}
        self._keep_exited: set[str] = set()
        self._placement = placement(self._terminals.values)
        self._recording: set[asyncio.Task[None]] = set()
        self._taking_up: asyncio.Task[None] | None = None
        self._keepers = Keepers()
        self.tickets = Tickets()

    @classmethod
    def build(cls, infra: Infrastructure) -> Terminals:
        settings = infra.settings
        shelf = Shelf.for_database(settings.database_url)
        if not infra.db.shared:
            return cls(infra.log.publish, settings.pty_buffer_chars, shelf, settings.pty_orphan_seconds)
        url, origin = settings.reachable_url, infra.log.origin
        return cls(
            infra.log.publish,
            settings.pty_buffer_chars,
            shelf,
            settings.pty_orphan_seconds,
            lambda held: Shared(infra.db, origin, url, settings.lease_seconds, held),
        )

    async def start(self) -> None:
        """Take up the terminals that servers of this database left on this machine (stopped or
        dead), now and every ``TAKE_UP_SECONDS``."""
        await self._take_up()
        self._taking_up = asyncio.create_task(self._keep_taking_up(), name="terminals:take-up")

    async def _keep_taking_up(self) -> None:
        while True:
            await asyncio.sleep(TAKE_UP_SECONDS)
            try:
                await self._take_up()
            except Exception:
                log.exception("taking up terminals failed")

    async def _take_up(self) -> None:
        for shelved in await asyncio.to_thread(self._shelf.listed):
            if shelved.pty_id in self._terminals:
                continue
            try:
                kept = await asyncio.to_thread(take_up, self._shelf.socket(shelved.pty_id))
            except (OSError, ValueError, SpawnFailed):
                self._shelf.drop(shelved.pty_id)  # its keeper is gone, and its terminal with it
                continue
            if kept is None or shelved.pty_id in self._terminals:
                if kept is not None:
                    kept.detach()
                continue  # another server serves it
            terminal = Terminal(shelved.info, shelved.directory, kept, self._buffer_limit, self._exited, shelved.cursor)
            try:
                await self._hold(terminal, shelved.keep_exited, taken_up=True)
            except Exception as exc:  # the database is away: the next look tries again
                log.warning("could not take up terminal %s: %r", terminal.id, exc)
                continue
            log.info("took up terminal %s (pid %s)", terminal.id, terminal.info["pid"])

    async def _hold(self, terminal: Terminal, keep_exited: bool, *, taken_up: bool = False) -> None:
        """Serve ``terminal`` from this server: read it, list it, and say so on the shelf and to
        the other processes. If that fails, a new terminal is ended (nobody else could find it:
        it must not run unseen); one ``taken_up`` is left to its keeper again, for a later try."""
        await terminal.start()
        self._terminals[terminal.id] = terminal
        if keep_exited:
            self._keep_exited.add(terminal.id)
        try:
            self._shelve(terminal)
            await self._placement.record(terminal)
        except BaseException:
            if taken_up:
                self._terminals.pop(terminal.id, None)
                self._keep_exited.discard(terminal.id)
                terminal.leave()
            else:
                self._forget(terminal.id)
                await terminal.close()
            raise

    def _shelve(self, terminal: Terminal) -> None:
        keep = terminal.id in self._keep_exited
        self._shelf.save(Shelved(self._info(terminal), terminal.directory, keep, terminal.cursor))

    def _announce(self, terminal: Terminal, event_type: str, props: dict[str, Any]) -> None:
        self._publish(Event(event_type, props, None, terminal.directory))

    def _info(self, terminal: Terminal) -> dict[str, Any]:
        """A snapshot: events are encoded later, after the terminal may have changed."""
        return {**terminal.info, "args": list(terminal.info["args"])}

    def in_directory(self, directory: str) -> list[dict[str, Any]]:
        """This process's terminals of ``directory``."""
        return [self._info(t) for t in self._terminals.values() if t.directory == directory]

    async def listing(self, directory: str) -> list[dict[str, Any]]:
        """Every terminal of ``directory`` in the cluster, in the order they were created."""
        others = await self._placement.others(directory)
        return sorted([*self.in_directory(directory), *others], key=lambda info: str(info["id"]))

    async def elsewhere(self, pty_id: str) -> Elsewhere | None:
        """Where another live process holds ``pty_id`` (None: here, or nowhere)."""
        if pty_id in self._terminals:
            return None
        return await self._placement.elsewhere(pty_id)

    async def successor(self, gone: Elsewhere) -> Elsewhere | None:
        """Where ``gone.pty_id`` is served once nothing answers at its owner's URL: the process
        that took it up since (None: this one did, or nobody serves it). While the stopped or
        dead owner's row is the one there, waits up to ``SUCCESSOR_WAIT_S`` for a process to
        take the pty up from its keeper."""
        deadline = asyncio.get_running_loop().time() + SUCCESSOR_WAIT_S
        while gone.pty_id not in self._terminals:
            found = await self._placement.elsewhere(gone.pty_id)
            if found is None or found.owner != gone.owner:
                return found
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(SUCCESSOR_POLL_S)
        return None

    def terminal(self, directory: str, pty_id: str) -> Terminal:
        terminal = self._terminals.get(pty_id)
        if terminal is None or terminal.directory != directory:
            raise TerminalNotFound(pty_id)
        return terminal

    def get(self, directory: str, pty_id: str) -> dict[str, Any]:
        return self._info(self.terminal(directory, pty_id))

    async def create(
        self,
        directory: str,
        *,
        command: str | None = None,
        args: list[str] | None = None,
        cwd: str | None = None,
        title: str | None = None,
        env: dict[str, str] | None = None,
        keep_exited: bool = False,
    ) -> dict[str, Any]:
        start_in = working_directory(directory, cwd)
        program, argv = command_line(command, args)
        pty_id = ids.new_id("pty")
        try:
            where = self._shelf.socket(pty_id)
            kept = await self._keepers.spawn(program, argv, start_in, environment(env), where, self._orphan_seconds)
        except (OSError, SpawnFailed) as exc:
            raise InvalidInput(f"Cannot start {program}: {getattr(exc, 'strerror', None) or exc}") from exc
        info = {
            "id": pty_id,
            "title": title or f"Terminal {pty_id[-4:]}",
            "command": program,
            "args": argv,
            "cwd": start_in,
            "status": "running",
            "pid": kept.pid,
        }
        terminal = Terminal(info, directory, kept, self._buffer_limit, self._exited)
        await self._hold(terminal, keep_exited)
        self._announce(terminal, "pty.created", {"info": self._info(terminal)})
        return self._info(terminal)

    async def update(
        self, directory: str, pty_id: str, *, title: str | None = None, size: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """Rename and/or resize (``size`` is rows, cols; a resize of an exited pty is a no-op)."""
        terminal = self.terminal(directory, pty_id)
        if title and title != terminal.info["title"]:
            terminal.info["title"] = title
            self._shelve(terminal)
            await self._placement.record(terminal)
        if size is not None:
            terminal.resize(*size)
        self._announce(terminal, "pty.updated", {"info": self._info(terminal)})
        return self._info(terminal)

    async def remove(self, directory: str, pty_id: str) -> None:
        """End the terminal and everything it started; returns once they are gone."""
        terminal = self.terminal(directory, pty_id)
        self._forget(pty_id)
        await self._placement.forget(pty_id)
        await terminal.close()
        self._announce(terminal, "pty.deleted", {"id": pty_id})

    def attach(self, directory: str, pty_id: str, cursor: int | None) -> tuple[Terminal, Subscription]:
        terminal = self.terminal(directory, pty_id)
        return terminal, terminal.attach(cursor)

    def _exited(self, terminal: Terminal) -> None:
        if self._terminals.get(terminal.id) is not terminal:
            return  # removed: its end is announced as pty.deleted
        self._announce(terminal, "pty.exited", {"id": terminal.id, "exitCode": terminal.info["exitCode"]})
        if terminal.id not in self._keep_exited:
            self._forget(terminal.id)
            self._in_background(self._placement.forget(terminal.id))
        else:
            self._in_background(self._placement.record(terminal))  # listed as exited everywhere

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._recording.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Task[None]) -> None:
        self._recording.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("recording a terminal's exit failed: %r", task.exception())

    def _forget(self, pty_id: str) -> None:
        self._terminals.pop(pty_id, None)
        self._keep_exited.discard(pty_id)
        self._shelf.drop(pty_id)

    async def stop(self) -> None:
        """Server shutdown: the running terminals are left to their keepers, for the next server
        of this database on this machine to take up (each keeper ends its terminal once
        ``pty_orphan_seconds`` pass without one); with ``pty_orphan_seconds`` 0 they end now."""
        if self._taking_up is not None:
            self._taking_up.cancel()
            await asyncio.gather(self._taking_up, return_exceptions=True)
        await self._keepers.close()
        await asyncio.gather(*self._recording, return_exceptions=True)
        left = [t for t in self._terminals.values() if t.running and self._orphan_seconds > 0]
        ending = [t for t in self._terminals.values() if t not in left]
        await self._placement.stop(frozenset(t.id for t in left))
        for terminal in left:
            self._shelve(terminal)  # with the cursor its output reached
            terminal.leave()
        for terminal in ending:
            self._shelf.drop(terminal.id)
        self._terminals.clear()
        self._keep_exited.clear()
        await asyncio.gather(*(t.close() for t in ending))
