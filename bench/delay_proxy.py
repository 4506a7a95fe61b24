"""A loopback TCP proxy that holds every chunk for a fixed delay in each direction, to measure the
server against a database across a network (this kernel has no netem). It also counts the chunks
sent towards the target: with a request/response protocol such as PostgreSQL's, each one is a
round trip the client waited for (a pipelined batch counts once, as it should).

Run as a process of its own, so its timing does not share a GIL with the client::

    python bench/delay_proxy.py --target 127.0.0.1:5432 --delay-ms 0.5 --stats counts.txt

It prints the port it listens on (127.0.0.1) as its first line, and writes ``<chunks> <bytes>``
to ``--stats`` on SIGUSR1. It stops on SIGTERM or when its parent's stdin closes.
"""

from __future__ import annotations

import argparse
import queue
import signal
import socket
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

# Why threads and time.sleep rather than asyncio: the event loop waits in epoll, whose timeout is
# whole milliseconds, so a 0.5 ms hold became more than 1 ms (a 1 ms round trip measured 2.6 ms).


class Counters:
    lock = threading.Lock()
    chunks = 0
    sent = 0


def _release(held: queue.SimpleQueue[tuple[float, bytes]], to: socket.socket) -> None:
    """Send each held chunk once it is due, in order; an empty chunk ends the direction."""
    while True:
        due, data = held.get()
        if not data:
            break
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            to.sendall(data)
        except OSError:
            break
    with suppress(OSError):
        to.shutdown(socket.SHUT_WR)


def _pipe(source: socket.socket, to: socket.socket, delay: float, counted: bool) -> None:
    held: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
    releaser = threading.Thread(target=_release, args=(held, to), daemon=True)
    releaser.start()
    try:
        while data := source.recv(65536):
            if counted:
                with Counters.lock:
                    Counters.chunks += 1
                    Counters.sent += len(data)
            held.put((time.monotonic() + delay, data))
    except OSError:
        pass
    finally:
        held.put((0.0, b""))
        releaser.join()


def _connection(client: socket.socket, target: tuple[str, int], delay: float) -> None:
    try:
        server = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream = threading.Thread(target=_pipe, args=(client, server, delay, True), daemon=True)
    upstream.start()
    _pipe(server, client, delay, False)
    upstream.join()
    client.close()
    server.close()


def _accept(listener: socket.socket, target: tuple[str, int], delay: float) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_connection, args=(client, target, delay), daemon=True).start()


def _write_stats(stats: Path) -> None:
    with Counters.lock:
        stats.write_text(f"{Counters.chunks} {Counters.sent}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delay each way (default 0.5)")
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    signal.signal(signal.SIGUSR1, lambda *_: _write_stats(args.stats))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=_accept, args=(listener, (host, int(port)), args.delay_ms / 1000), daemon=True).start()
    sys.stdin.buffer.read()  # until the parent's end of the pipe closes


if __name__ == "__main__":
    main()
