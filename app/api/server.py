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
Figures for all of these: bench/README.md, "Figures behind the code's choices"."""

from __future__ import annotations

import gc
import socket

import uvicorn

from app.runtime.service import Runtime

YOUNG_OBJECTS = 10_000  # the youngest generation's collection threshold (see the module's doc)


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: Runtime, *, freeze_heap: bool = False) -> None:
        config.timeout_keep_alive = runtime.settings.keep_alive_seconds
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

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._runtime.feeds.close()
        await self._runtime.hand_off()  # before the wait for connections: requests in it get answers
        await super().shutdown(sockets)
