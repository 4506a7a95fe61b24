"""Overhead of a remote (OpenAI-compatible) model over the built-in echo model, end to end.

One ``opensession serve`` subprocess (as in ``bench/bench.py``) and an instant chat-completions
stub on 127.0.0.1 in a process of its own (HTTP/1.1 keep-alive, TCP_NODELAY, the whole stream
written at once), declared as provider ``stub`` in the project's opencode.json. Two sessions, one
per model: after warm-up prompts (the first prompt of a session also generates its title, which
would compete with that turn) the measured prompts alternate between them, each awaited to
``session.idle``. What is left between the two paths is the server's own cost of calling a
provider: resolving it, building and sending the request, parsing the stream. The stub counts the
connections it accepts: one per turn would mean connections are not reused.

Run from the repository root::

    python bench/provider.py [--quick] [--json results.json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from stub import InstantStub

from bench import (
    EventStream,
    Metric,
    Server,
    cli,
    nearest_rank,
    new_session,
    progress,
    running,
    timed,
    workspace,
)

ECHO = {"providerID": "opensession", "modelID": "echo"}
REMOTE = {"providerID": "stub", "modelID": "stub-model"}
FIRST_DELTA_TARGET_MS = 2.0  # remote minus echo, medians
IDLE_TARGET_MS = 3.0


@contextmanager
def stub_project() -> Iterator[tuple[InstantStub, Server]]:
    with workspace("opensession-provider-bench-") as (base, project, config), InstantStub() as stub:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": f"http://127.0.0.1:{stub.port}/v1", "apiKey": "bench-key"},
            "models": {"stub-model": {}},
        }
        (project / "opencode.json").write_text(json.dumps({"provider": {"stub": provider}}))
        with running(Server(base / "bench.db", project, config, base / "server.log")) as srv:
            yield stub, srv


def prompt_once(
    client: httpx.Client, events: EventStream, session_id: str, model: dict[str, str]
) -> tuple[float, float]:
    """(prompt -> first delta, prompt -> idle) in ms for one prompt on an idle session."""
    events.drain()
    started = time.perf_counter()
    body = {"parts": [{"type": "text", "text": "hi"}], "model": model}
    timed(lambda: client.post(f"/session/{session_id}/prompt_async", json=body), 204)
    seen = events.wait_for(session_id, {"message.part.delta", "session.idle"})
    return (seen["message.part.delta"] - started) * 1000, (seen["session.idle"] - started) * 1000


def _difference(name: str, remote: Metric, echo: Metric, target: float, notes: list[str]) -> Metric:
    p50 = statistics.median(remote.samples) - statistics.median(echo.samples)
    p90 = nearest_rank(remote.samples, 0.9) - nearest_rank(echo.samples, 0.9)
    notes.append(f"{name}: remote - echo = {p50:+.2f} ms at p50, {p90:+.2f} ms at p90")
    return Metric(f"{name}: remote - echo", "ms", target, value=p50)


def run(quick: bool, notes: list[str]) -> list[Metric]:
    warmup, iterations = (3, 20) if quick else (5, 100)
    echo_delta = Metric("echo: prompt -> first delta", "ms", 5)
    remote_delta = Metric("remote: prompt -> first delta", "ms", 5 + FIRST_DELTA_TARGET_MS)
    echo_idle = Metric("echo: prompt -> session.idle", "ms", 15)
    remote_idle = Metric("remote: prompt -> session.idle", "ms", 15 + IDLE_TARGET_MS)
    with (
        stub_project() as (stub, srv),
        httpx.Client(base_url=srv.url, timeout=10, trust_env=False) as client,
        EventStream(srv.url) as events,
    ):
        paths = [
            (new_session(client), ECHO, echo_delta, echo_idle),
            (new_session(client), REMOTE, remote_delta, remote_idle),
        ]
        progress(f"server at {srv.url}, stub on port {stub.port}: {warmup} warm-up prompts per model")
        for _ in range(warmup):
            for session_id, model, _delta, _idle in paths:
                prompt_once(client, events, session_id, model)
        time.sleep(0.2)  # titles of the first prompts finish off the clock
        connections, requests = stub.connections, stub.requests
        progress(f"{iterations} measured prompts per model, alternating")
        for _ in range(iterations):
            for session_id, model, delta, idle in paths:
                first, done = prompt_once(client, events, session_id, model)
                delta.samples.append(first)
                idle.samples.append(done)
        notes.append(
            f"stub: {stub.requests - requests} requests over {stub.connections - connections} new connections "
            f"during the measured prompts ({stub.connections} connections, {stub.requests} requests in all)"
        )
    return [
        echo_delta,
        remote_delta,
        _difference("first delta", remote_delta, echo_delta, FIRST_DELTA_TARGET_MS, notes),
        echo_idle,
        remote_idle,
        _difference("idle", remote_idle, echo_idle, IDLE_TARGET_MS, notes),
    ]


def main(argv: list[str] | None = None) -> int:
    return cli(run, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
