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
import asyncio
import signal
import sys
import time
from pathlib import Path


class Counters:
    chunks = 0
    sent = 0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, counted: bool) -> None:
    """Forward ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived, in order."""
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def release() -> None:
        while True:
            due, data = await held.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    releaser = asyncio.create_task(release())
    try:
        while data := await reader.read(65536):
            if counted:
                Counters.chunks += 1
                Counters.sent += len(data)
            held.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    finally:
        held.put_nowait((0.0, b""))
        await asyncio.gather(releaser, return_exceptions=True)


async def _serve(target_host: str, target_port: int, delay: float, stats: Path) -> None:
    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, server_writer, delay, counted=True),
            _pipe(server_reader, client_writer, delay, counted=False),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: stats.write_text(f"{Counters.chunks} {Counters.sent}\n"))
    loop.add_reader(sys.stdin.fileno(), lambda: stopped.set() if not sys.stdin.buffer.read1(1) else None)
    async with server:
        await stopped.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delay each way (default 0.5)")
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    asyncio.run(_serve(host, int(port), args.delay_ms / 1000, args.stats))


if __name__ == "__main__":
    main()
