"""A loopback TCP proxy that holds every chunk for a fixed delay in each direction, to measure the
server against a database across a network (this kernel has no netem). It also counts the chunks
sent towards the target: with a request/response protocol such as PostgreSQL's, each one is a
round trip the client waited for (a pipelined batch counts once, as it should).

Run as a process of its own, so its timing does not share a GIL with the client::

    python bench/delay_proxy.py --target 127.0.0.1:5432 --delay-ms 0.5 --stats counts.txt

It prints the port it listens on (127.0.0.1) as its first line, and writes ``<chunks> <bytes>``
to ``--stats`` on SIGUSR1. It stops on SIGTERM or when its parent's stdin closes.

One thread and ``select``, whose timeout is in microseconds (epoll's is in whole milliseconds, so
a 0.5 ms hold became more than 1 ms). Its CPU competes with the servers on a small machine, so it
is kept lean: the earlier design, two threads per direction handing chunks over through a queue,
cost about twice the CPU per round trip (bench/README.md, "Cluster figures").
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import sys
import time
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import Any

EARLY_S = 50e-6  # a chunk due this soon is sent now: a wake-up of its own would cost more than that


class Direction:
    """One way of one connection: chunks read from ``source``, each sent to ``target`` once due."""

    def __init__(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        self.source = source
        self.target = target
        self.counted = counted
        self.held: deque[tuple[float, bytes]] = deque()  # (due, chunk), in arrival order
        self.unsent = b""  # the part of due chunks the target's buffer did not take yet
        self.ended = False  # the source closed: shut the target's side once all is sent
        self.done = False

    def due(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            self.unsent += self.held.popleft()[1]

    def flush(self) -> None:
        if self.done:
            return
        if self.unsent:
            try:
                sent = self.target.send(self.unsent)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            self.unsent = self.unsent[sent:]
        if self.ended and not self.held and not self.unsent:
            self.close()

    def close(self) -> None:
        if not self.done:
            self.done = True
            with suppress(OSError):
                self.target.shutdown(socket.SHUT_WR)


class Connection:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.sockets = (client, server)
        self.directions = (Direction(client, server, True), Direction(server, client, False))

    @property
    def done(self) -> bool:
        return all(direction.done for direction in self.directions)

    def close(self) -> None:
        for sock in self.sockets:
            with suppress(OSError):
                sock.close()


class Proxy:
    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.connections: list[Connection] = []
        self.reading: dict[Any, Direction] = {}  # the open directions by the socket they read
        self.chunks = 0
        self.sent = 0

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        try:
            server = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        connection = Connection(client, server)
        self.connections.append(connection)
        for direction in connection.directions:
            self.reading[direction.source] = direction

    def _read(self, direction: Direction, now: float) -> None:
        try:
            data = direction.source.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            direction.ended = True
            del self.reading[direction.source]
            return
        if direction.counted:
            self.chunks += 1
            self.sent += len(data)
        direction.held.append((now + self.delay, data))

    def serve(self, stop_on: int) -> None:
        listener = self.listener
        while True:
            directions = [d for c in self.connections for d in c.directions]
            now = time.monotonic()
            first = min((d.held[0][0] for d in directions if d.held), default=None)
            timeout = None if first is None else max(0.0, first - now - EARLY_S)
            writing = [d.target for d in directions if d.unsent]
            readable, _, _ = select.select([listener, stop_on, *self.reading], writing, [], timeout)
            now = time.monotonic()
            for sock in readable:
                if sock is listener:
                    self._accept()
                elif sock == stop_on:
                    return
                else:
                    self._read(self.reading[sock], now)
            for direction in directions:
                if direction.held or direction.unsent or direction.ended:
                    direction.due(now + EARLY_S)
                    direction.flush()
            if any(c.done for c in self.connections):
                for connection in [c for c in self.connections if c.done]:
                    self.connections.remove(connection)
                    for sock in connection.sockets:
                        self.reading.pop(sock, None)
                    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delay each way (default 0.5)")
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    proxy = Proxy((host, int(port)), args.delay_ms / 1000)
    print(proxy.listener.getsockname()[1], flush=True)

    def write_stats(*_: object) -> None:
        args.stats.write_text(f"{proxy.chunks} {proxy.sent}\n")

    signal.signal(signal.SIGUSR1, write_stats)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    proxy.serve(sys.stdin.fileno())  # until the parent's end of the pipe closes


if __name__ == "__main__":
    main()
