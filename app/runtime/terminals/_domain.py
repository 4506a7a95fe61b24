"""The terminals of this process, by instance directory: create, read, update, remove, connect
tickets, and the ``pty.*`` events (instance events: they carry a directory, no session); in a
cluster, where the other processes' terminals are (``_placement.py``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from app import ids
from app.events.model import Event
from app.runtime.errors import InvalidInput, TerminalNotFound
from app.runtime.infrastructure import Infrastructure
from app.runtime.terminals._launch import command_line, environment, working_directory
from app.runtime.terminals._placement import Alone, Elsewhere, Placement, Shared
from app.runtime.terminals._process import spawn
from app.runtime.terminals._terminal import Subscription, Terminal
from app.runtime.terminals._tickets import Tickets

log = logging.getLogger("opensession.terminals")


class Terminals:
    """Invariant: a terminal is listed until it is removed, or, if ``keep_exited`` was false
    when it was created (legacy ``POST /pty``), until its process exits."""

    def __init__(
        self,
        publish: Callable[[Event], None],
        buffer_limit: int,
        placement: Callable[[Callable[[], Iterable[Terminal]]], Placement] = lambda _held: Alone(),
    ) -> None:
        self._publish = publish
        self._buffer_limit = buffer_limit
        self._terminals: dict[str, Terminal] = {}
        self._keep_exited: set[str] = set()
        self._placement = placement(self._terminals.values)
        self._recording: set[asyncio.Task[None]] = set()
        self.tickets = Tickets()

    @classmethod
    def build(cls, infra: Infrastructure) -> Terminals:
        settings = infra.settings
        if not infra.db.shared:
            return cls(infra.log.publish, settings.pty_buffer_chars)
        url, origin = settings.reachable_url, infra.log.origin
        return cls(
            infra.log.publish,
            settings.pty_buffer_chars,
            lambda held: Shared(infra.db, origin, url, settings.lease_seconds, held),
        )

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
        try:
            process, master = spawn(program, argv, start_in, environment(env))
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise InvalidInput(f"Cannot start {program}: {getattr(exc, 'strerror', None) or exc}") from exc
        pty_id = ids.new_id("pty")
        info = {
            "id": pty_id,
            "title": title or f"Terminal {pty_id[-4:]}",
            "command": program,
            "args": argv,
            "cwd": start_in,
            "status": "running",
            "pid": process.pid,
        }
        terminal = Terminal(info, directory, process, master, self._buffer_limit, self._exited)
        self._terminals[pty_id] = terminal
        if keep_exited:
            self._keep_exited.add(pty_id)
        try:
            await self._placement.record(terminal)
        except BaseException:
            self._forget(pty_id)  # nobody else could find it: it must not run unseen
            await terminal.close()
            raise
        self._announce(terminal, "pty.created", {"info": self._info(terminal)})
        return self._info(terminal)

    async def update(
        self, directory: str, pty_id: str, *, title: str | None = None, size: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """Rename and/or resize (``size`` is rows, cols; a resize of an exited pty is a no-op)."""
        terminal = self.terminal(directory, pty_id)
        if title and title != terminal.info["title"]:
            terminal.info["title"] = title
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

    async def stop(self) -> None:
        """Server shutdown: end every terminal's session, leaving no orphan behind."""
        terminals = list(self._terminals.values())
        self._terminals.clear()
        self._keep_exited.clear()
        await asyncio.gather(*self._recording, return_exceptions=True)
        await self._placement.stop()
        await asyncio.gather(*(t.close() for t in terminals))
