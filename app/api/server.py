"""uvicorn's server, ending the event streams before it waits for its connections at shutdown.

Event streams never end by themselves, so without this a shutdown would wait for them for the
whole graceful timeout and then cancel them (sse-starlette, which served them before, ended them
on its own shutdown watch)."""

from __future__ import annotations

import socket

import uvicorn

from app.runtime.service import Runtime


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self._runtime = runtime

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._runtime.feeds.close()
        await super().shutdown(sockets)
