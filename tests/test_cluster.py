"""Several server processes on one PostgreSQL database behave, to a client, like one server:
events produced on one process stream from every other, per session in order and without gaps
or duplicates, and a cursor from one process resumes on another."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import text_prompt
from tests.postgres import Cluster
from tests.servers import ProcessServer, process_server
from tests.sse import EventCollector

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster_url(postgres_cluster: Cluster | None) -> str:
    if postgres_cluster is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    return postgres_cluster.create_database()


@pytest.fixture
def two(cluster_url: str, project_dir: Path, config_dir: Path) -> Iterator[tuple[ProcessServer, ProcessServer]]:
    servers = [process_server(cluster_url, project_dir, config_dir) for _ in range(2)]
    for server in servers:
        server.start()
    try:
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


def _durable(events: EventCollector, sid: str) -> list[tuple[str, str]]:
    """(id, type) of the session's frames that carry a durable event."""
    return [
        (f.id or "", f.type) for f in events.of_session(sid) if f.type in ("message.updated", "message.part.updated")
    ]


def test_events_cross_processes_in_order(two: tuple[ProcessServer, ProcessServer]) -> None:
    a, b = two
    sid = httpx.post(f"{a.url}/session").json()["id"]
    with EventCollector(f"{a.url}/event") as on_a, EventCollector(f"{b.url}/event") as on_b:
        for text in ("first", "second"):
            assert httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(text)).status_code == 204
            on_b.wait_for(
                lambda f, t=text: f.type == "message.part.updated" and f.properties["part"].get("text") == f"Echo: {t}",
                timeout=15,
            )
        on_a.wait_idle(sid, timeout=15)
        on_b.wait_idle(sid, timeout=15)
        time.sleep(0.3)
        assert _durable(on_b, sid) == _durable(on_a, sid)  # same events, same ids, same order
        ids = [int(i) for i, _ in _durable(on_b, sid)]
        assert ids == sorted(set(ids))
        assert any(f.type == "message.part.delta" for f in on_b.of_session(sid))  # deltas cross too
        resume_from = _durable(on_a, sid)[2][0]
    # A cursor from process A resumes on process B with exactly what followed it.
    with EventCollector(f"{b.url}/event", headers={"Last-Event-ID": resume_from}) as resumed:
        last = _durable(on_a, sid)[-1][0]
        resumed.wait_for(lambda f: f.id == last, timeout=10)
        assert _durable(resumed, sid) == [e for e in _durable(on_a, sid) if int(e[0]) > int(resume_from)]


def test_a_prompt_on_either_process_is_answered_once(two: tuple[ProcessServer, ProcessServer]) -> None:
    a, b = two
    sid = httpx.post(f"{a.url}/session").json()["id"]
    for server, text in ((a, "one"), (b, "two"), (a, "three"), (b, "four")):
        assert httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt(text)).status_code == 204
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        history = httpx.get(f"{b.url}/session/{sid}/message").json()
        replies = [m for m in history if m["info"]["role"] == "assistant" and "completed" in m["info"]["time"]]
        if len(replies) >= 4:
            break
        time.sleep(0.1)
    users = [m for m in history if m["info"]["role"] == "user"]
    replies = [m for m in history if m["info"]["role"] == "assistant"]
    assert len(users) == 4 and len(replies) == 4, [m["info"] for m in history]
    assert sorted(r["info"]["parentID"] for r in replies) == sorted(u["info"]["id"] for u in users)
