"""The terminals of this process, by instance directory: create, read, update, remove, connect
tickets, and the ``pty.*`` events (instance events: they carry a directory, no session)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from typing import Any

from app import ids
from app.events.model import Event
from app.runtime.errors import InvalidInput, TerminalNotFound
from app.runtime.infrastructure import Infrastructure
from app.runtime.terminals._launch import command_line, environment, working_directory
from app.runtime.terminals._process import spawn
from app.runtime.terminals._terminal import Subscription, Terminal
from app.runtime.terminals._tickets import Tickets


class Terminals:
    """Invariant: a terminal is listed until it is removed, or, if ``keep_exited`` was false
    when it was created (legacy ``POST /pty``), until its process exits."""

    def __init__(self, publish: Callable[[Event], None], buffer_limit: int) -> None:
        self._publish = publish
        self._buffer_limit = buffer_limit
        self._terminals: dict[str, Terminal] = {}
        self._keep_exited: set[str] = set()
        self.tickets = Tickets()

    @classmethod
    def build(cls, infra: Infrastructure) -> Terminals:
        return cls(infra.log.publish, infra.settings.pty_buffer_chars)

    def _announce(self, terminal: Terminal, event_type: str, props: dict[str, Any]) -> None:
        self._publish(Event(event_type, props, None, terminal.directory))

    def _info(self, terminal: Terminal) -> dict[str, Any]:
        """A snapshot: events are encoded later, after the terminal may have changed."""
        return {**terminal.info, "args": list(terminal.info["args"])}

    def in_directory(self, directory: str) -> list[dict[str, Any]]:
        return [self._info(t) for t in self._terminals.values() if t.directory == directory]

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
        self._announce(terminal, "pty.created", {"info": self._info(terminal)})
        return self._info(terminal)

    def update(
        self, directory: str, pty_id: str, *, title: str | None = None, size: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """Rename and/or resize (``size`` is rows, cols; a resize of an exited pty is a no-op)."""
        terminal = self.terminal(directory, pty_id)
        if title:
            terminal.info["title"] = title
        if size is not None:
            terminal.resize(*size)
        self._announce(terminal, "pty.updated", {"info": self._info(terminal)})
        return self._info(terminal)

    async def remove(self, directory: str, pty_id: str) -> None:
        """End the terminal and everything it started; returns once they are gone."""
        terminal = self.terminal(directory, pty_id)
        self._forget(pty_id)
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

    def _forget(self, pty_id: str) -> None:
        self._terminals.pop(pty_id, None)
        self._keep_exited.discard(pty_id)

    async def stop(self) -> None:
        """Server shutdown: end every terminal's session, leaving no orphan behind."""
        terminals = list(self._terminals.values())
        self._terminals.clear()
        self._keep_exited.clear()
        await asyncio.gather(*(t.close() for t in terminals))
