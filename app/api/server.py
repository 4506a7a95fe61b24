"""uvicorn's server, ending the event streams and handing its sessions to the other processes
(a cluster) before it waits for its connections at shutdown.

Every opensession server is one of these (``opensession serve``, the command line's in-process
server, the tests'), so this is also where idle connections are kept open ``keep_alive_seconds``
instead of uvicorn's 5 s: clients' pools reuse a connection for up to 5 s (Node's and httpx's
default), and a server closing it at the same moment left a request unanswered now and then under
load.

Event streams never end by themselves, so without this a shutdown would wait for them for the
whole graceful timeout and then cancel them (sse-starlette, which served them before, ended them
on its own shutdown watch).

A server process (``freeze_heap``) also moves everything it loaded to start into the garbage
collector's permanent generation once it is up: a full collection then no longer walks the hundreds
of thousands of objects of the modules and the app, which under load stalled the event loop for
tens of milliseconds at a time (every request in flight waited for it); what the default model's
client loads on a thread right after start-up is frozen once it is loaded. Not for servers inside a
test process: they come and go, and what is frozen is never collected.

``opensession serve`` runs its start-up with the collector off (app/cli/serve.py) and turns it on
here, after the freeze: imports only add objects that live as long as the process, yet the
collector ran pass after pass over them while they loaded (one of them full), a noticeable part of
a start-up's CPU. The price is the little cyclic garbage the start-up makes, frozen with the rest
instead of collected.

It also lets the youngest generation grow to ``YOUNG_OBJECTS`` before it is collected (Python's
default is 700). A turn in flight holds a few hundred fresh dicts and lists (events, rows,
requests), so under load the default collected every few hundred microseconds and promoted
whatever was in flight at that moment, which the next generation then walked again. With a turn's
objects freed by reference counting (no cycles: app/store/database.py, app/providers/http.py),
most are gone before a larger young generation fills up: less server CPU per prompt, with or
without subscribers, and a young collection pauses the loop for a few milliseconds at most.
Figures for all of these: bench/README.md, "Figures behind the code's choices".

An exit asked for (SIGTERM, or ``should_exit`` set from another thread) starts the shutdown at
once, and the shutdown waits for connections only while there are some: uvicorn notices
``should_exit`` at its next 0.1 s tick and then sleeps another 0.1 s before it waits, so a
rolling restart began its hand-off up to 0.2 s late, and each of the tests' servers took 0.2 s
to stop (a fifth of the suite's time went to that)."""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import socket
from contextlib import suppress
from typing import Any

import uvicorn

from app.api.middleware import GIVEN_UP
from app.runtime.service import Runtime

YOUNG_OBJECTS = 10_000  # the youngest generation's collection threshold (see the module's doc)
TICK_S = 0.1  # how often uvicorn's housekeeping (``on_tick``: the Date header, limits) runs
CLOSING_POLL_S = 0.01  # how often a shutdown looks whether its connections and tasks are done
# A shutdown still going after this long logs where every task waits: a stop that hangs says where.
STUCK_STOP_S = 20.0

log = logging.getLogger("opensession.server")


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: Runtime, *, freeze_heap: bool = False) -> None:
        config.timeout_keep_alive = runtime.settings.keep_alive_seconds
        # Before uvicorn's __init__, which sets ``should_exit`` (the setter below reads these).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_asked = asyncio.Event()
        super().__init__(config)
        self._runtime = runtime
        self._freeze_heap = freeze_heap

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._freeze_heap:
            gc.freeze()
            _, *older = gc.get_threshold()
            gc.set_threshold(YOUNG_OBJECTS, *older)
            gc.enable()
            warming = self._runtime.warming
            if warming is not None:  # what it loads stays for good too
                warming.add_done_callback(lambda _task: gc.freeze())

    @property  # uvicorn's is a plain attribute
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        """Set from a signal handler or another thread: wakes ``main_loop`` through its loop."""
        self._should_exit = value
        if value and self._loop is not None:
            with suppress(RuntimeError):  # the loop has closed: nothing waits any more
                self._loop.call_soon_threadsafe(self._exit_asked.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        ticks = 0
        while not self.should_exit and not await self.on_tick(ticks):
            ticks = (ticks + 1) % 864_000
            with suppress(TimeoutError):
                await asyncio.wait_for(self._exit_asked.wait(), TICK_S)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's steps in its order (stop listening, ask each connection to finish, wait for
        them up to the graceful timeout, then the lifespan's shutdown), but the event streams are
        ended and the sessions handed off first, so requests waiting on them get answers."""
        stuck = asyncio.get_running_loop().call_later(STUCK_STOP_S, _log_waiting_tasks)
        try:
            await self._shutdown(sockets)
        finally:
            stuck.cancel()

    async def _shutdown(self, sockets: list[socket.socket] | None) -> None:
        self._runtime.feeds.close()
        await self._runtime.hand_off()
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
                    await asyncio.sleep(CLOSING_POLL_S)
                for server in self.servers:
                    await server.wait_closed()
        except TimeoutError:
            for connection in list(self.server_state.connections):
                if _passed_on_unanswered(connection):
                    connection.transport.abort()  # as if this process had died: the proxy tries another
            for task in self.server_state.tasks:
                task.cancel(msg=GIVEN_UP)  # answered 503 (app.api.middleware.StopAnswer), where not dropped
        if not self.force_exit:
            await self.lifespan.shutdown()


def _passed_on_unanswered(connection: Any) -> bool:
    """Whether ``connection`` (uvicorn's protocol) carries a request that a proxy passed on
    (``X-Forwarded-For``) and that has no answer begun. Dropping it, as a process that died would,
    has the proxy send the request to another replica (the shipped nginx configuration:
    ``proxy_next_upstream error non_idempotent``), where the Idempotency-Key the proxy added finds
    what this one admitted and answers it, so a rolling restart fails no request; a client
    reached directly gets the 503 instead."""
    cycle, scope = getattr(connection, "cycle", None), getattr(connection, "scope", None)
    if cycle is None or scope is None or cycle.response_started:
        return False
    return any(name == b"x-forwarded-for" for name, _ in scope.get("headers", ()))


def _log_waiting_tasks() -> None:
    """Where each task of a shutdown that takes too long waits (its coroutine's stack)."""
    for task in asyncio.all_tasks():
        stack = io.StringIO()
        task.print_stack(file=stack)
        log.warning("stopping for %g s, still waiting: %s\n%s", STUCK_STOP_S, task.get_name(), stack.getvalue())
