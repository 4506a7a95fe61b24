"""What one ``EventBus.publish`` costs with many subscribers, in-process (no server, no sockets).

1,000 subscribers spread over 100 directories, as ``/event`` streams subscribe (directory
filter, frames encoded and weighed once per event), plus a few taking everything, as
``/global/event`` does. Each published event belongs to one directory. Two ways to subscribe:

- ``scan``: every subscriber takes everything from the bus and filters with ``accept`` (what the
  bus did before it had routes): each event is offered to all 1,000;
- ``routed``: subscribers name their directory and the bus offers an event only to its
  directory's subscribers and to those taking everything.

Queues are drained after every round so no subscriber ever overflows; the figure is the time of
``publish`` alone, per event.

    python bench/fanout.py [--subscribers 1000] [--directories 100] [--events 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.api.sse import legacy_envelope
from app.events.bus import EventBus, Subscription
from app.events.model import Event

EVERYTHING = 2  # /global/event-like subscribers, besides the per-directory ones
ROUND = 100  # events published between two drains


def subscribe(bus: EventBus, directory: str, routed: bool) -> Subscription:
    def weigh(event: Event) -> int:
        return len(event.encoded("legacy", legacy_envelope))

    def accept(event: Event) -> bool:
        return event.directory == directory and not event.is_next

    return bus.subscribe(accept, directory=directory if routed else None, weigh=weigh)


def measure(subscribers: int, directories: int, events: int, routed: bool) -> list[float]:
    """Microseconds per published event, one figure per round."""
    bus = EventBus(4096)
    names = [f"/work/project-{i}" for i in range(directories)]
    subscriptions = [subscribe(bus, names[i % directories], routed) for i in range(subscribers)]
    subscriptions += [bus.subscribe() for _ in range(EVERYTHING)]
    samples: list[float] = []
    for start in range(0, events, ROUND):
        batch = [
            Event(
                "message.part.delta",
                {"sessionID": f"ses_{i}", "messageID": "msg", "partID": "prt", "field": "text", "delta": "hi"},
                session_id=f"ses_{i}",
                directory=names[i % directories],
            )
            for i in range(start, start + ROUND)
        ]
        began = time.perf_counter()
        for event in batch:
            bus.publish(event)
        samples.append((time.perf_counter() - began) / ROUND * 1e6)
        for subscription in subscriptions:
            subscription.ready(ROUND * 2)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--directories", type=int, default=100)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    print(f"{args.subscribers} subscribers over {args.directories} directories, +{EVERYTHING} taking everything")
    for routed in (False, True):
        samples = sorted(measure(args.subscribers, args.directories, args.events, routed))
        p90 = samples[int(len(samples) * 0.9)]
        name = "routed" if routed else "scan"
        print(f"{name:7} publish: median {statistics.median(samples):8.1f} us/event, p90 {p90:8.1f} us/event")


if __name__ == "__main__":
    main()
