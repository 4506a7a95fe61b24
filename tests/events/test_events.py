"""Event streams: framing, headers, heartbeats, the global envelope and resuming by id."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.events.bus import EventBus, Overflowed
from app.events.model import Event
from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.postgres import OlderTransaction
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector, Frame, first_frame


def test_stream_headers_and_first_frame(server: ThreadServer) -> None:
    with EventCollector(f"{server.url}/event") as events:
        first = events.wait_for(lambda _f: True)
        headers = events.response_headers
    assert events.status == 200
    assert headers is not None
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache, no-transform"
    assert headers["x-accel-buffering"] == "no"
    assert headers["x-content-type-options"] == "nosniff"
    assert first.type == "server.connected" and first.data["properties"] == {}
    assert first.data["id"].startswith("evt_") and first.id is not None


def test_event_stream_is_scoped_to_its_directory(server: ThreadServer, client: httpx.Client, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    with (
        EventCollector(f"{server.url}/event") as mine,
        EventCollector(f"{server.url}/event?directory={other}") as theirs,
    ):
        sid = create_session(client)["id"]
        client.post(f"/session/{sid}/message", json=text_prompt("scoped"))
        mine.wait_idle(sid)
        other_sid = client.post("/session", params={"directory": str(other)}).json()["id"]
        theirs.wait_for(lambda f: f.type == "session.created")
    assert {f.properties.get("sessionID") for f in theirs.frames if f.properties} == {other_sid}
    assert other_sid not in {f.properties.get("sessionID") for f in mine.frames}


def test_global_stream_envelope_and_sync_twins(server: ThreadServer, client: httpx.Client) -> None:
    with EventCollector(f"{server.url}/global/event") as events:
        first = events.wait_for(lambda _f: True)
        sid = create_session(client)["id"]
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("global"))
        events.wait_for(lambda f: f.type == "session.idle" and f.properties.get("sessionID") == sid)
    assert first.data == {"payload": {"id": first.data["payload"]["id"], "type": "server.connected", "properties": {}}}
    created = next(f for f in events.frames if f.type == "session.created")
    assert created.data["directory"] == str(server.settings.directory)
    assert created.data["project"] == "global"  # the test project is not a git repository
    twins = [f.data["payload"]["syncEvent"] for f in events.frames if f.type == "sync"]
    assert twins[0]["type"] == "session.created.1" and twins[0]["seq"] == 0 and twins[0]["aggregateID"] == sid
    assert [t["seq"] for t in twins] == list(range(len(twins)))  # per-session sequence, gap-free
    assert not any(t["type"].startswith("message.part.delta") for t in twins)


def test_reconnect_with_last_event_id_receives_what_was_missed(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as before:
        client.post(f"/session/{sid}/message", json=text_prompt("first"))
        before.wait_idle(sid)
        resume_from = before.frames[-1].id
    assert resume_from is not None
    # While no client is connected, another turn runs.
    client.post(f"/session/{sid}/message", json=text_prompt("second while away"))
    with EventCollector(f"{server.url}/event", headers={"Last-Event-ID": resume_from}) as after:
        after.wait_for(
            lambda f: (
                f.type == "message.updated"
                and f.properties["info"]["role"] == "assistant"
                and "completed" in f.properties["info"]["time"]
            )
        )
        durable = [f for f in after.frames if f.type in ("message.updated", "message.part.updated")]
    texts = [f.properties["part"].get("text") for f in durable if f.type == "message.part.updated"]
    assert "second while away" in texts and "Echo: second while away" in texts
    assert "first" not in texts  # nothing from before the cursor is replayed
    ids = [int(str(f.id)) for f in durable]
    assert ids == sorted(set(ids))


def test_heartbeat_is_a_json_frame(settings: Settings) -> None:
    with (
        thread_server(settings.model_copy(update={"heartbeat_seconds": 0.2})) as server,
        EventCollector(f"{server.url}/event") as events,
    ):
        beat = events.wait_for(lambda f: f.type == "server.heartbeat", timeout=5)
    # Not an event: it must not move the client's resume position, so it carries no id.
    assert beat.data["properties"] == {} and beat.id is None


@pytest.mark.parametrize("path", ["/event", "/global/event"])
def test_dropping_after_the_first_frame_then_resuming_misses_nothing(
    server: ThreadServer, client: httpx.Client, path: str
) -> None:
    """``server.connected`` carries the position the stream starts from, so a client that drops
    right after it and reconnects with that id (as EventSource does) still gets the replay."""
    sid = create_session(client)["id"]
    fresh = first_frame(f"{server.url}{path}")
    assert fresh.type == "server.connected" and fresh.id is not None
    for text in ("one while away", "two while away", "three while away"):
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    # Resume from the fresh stream's position, drop after the first frame, resume again.
    resumed = first_frame(f"{server.url}{path}", {"Last-Event-ID": fresh.id})
    assert resumed.type == "server.connected" and resumed.id == fresh.id
    with EventCollector(f"{server.url}{path}", headers={"Last-Event-ID": resumed.id}) as again:
        again.wait_for(
            lambda f: f.type == "message.part.updated" and f.properties["part"].get("text") == "Echo: three while away"
        )
        texts = [f.properties["part"].get("text") for f in again.frames if f.type == "message.part.updated"]
    for text in ("one while away", "two while away", "three while away"):
        assert text in texts and f"Echo: {text}" in texts


def test_bad_last_event_id_is_400(client: httpx.Client) -> None:
    response = client.get("/event", headers={"Last-Event-ID": "not-a-number"})
    assert response.status_code == 400
    assert response.json()["data"]["kind"] == "Headers"


@pytest.mark.asyncio
async def test_slow_subscriber_is_cut_off_not_buffered() -> None:
    bus = EventBus(queue_size=8)
    slow = bus.subscribe()
    fast = bus.subscribe()
    for i in range(20):
        bus.publish(Event("test", {"i": i}, durable=True, cursor=i + 1))
        # the fast subscriber keeps up
        received = await fast.next(timeout=1)
        assert received is not None and received.properties == {"i": i}
    assert slow.overflowed and bus.subscriber_count == 1
    assert slow.backlog == 0  # what it held is released at once: the log has all of it
    with pytest.raises(Overflowed):
        await slow.next(timeout=1)
    await asyncio.sleep(0)


@pytest.mark.parametrize("path", ["/event", "/global/event"])
def test_a_subscriber_that_falls_behind_is_told_where_to_resume(settings: Settings, path: str) -> None:
    """A client that stops reading is cut off with a last ``server.overflow`` frame carrying the
    id to resume from; the response ends properly, and resuming from that id misses nothing."""
    settings = settings.model_copy(update={"subscriber_queue_size": 50})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
        sock.connect(("127.0.0.1", settings.port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode())
        for i in range(40):  # megabytes: more than the queue and the kernel's socket buffers hold
            client.post(f"/session/{sid}/message", json=text_prompt(f"burst {i} " + "x" * 40_000))
        sock.settimeout(5)  # below the heartbeat interval: a stream that does not end fails here
        received = b""
        # Until the chunked response's last chunk: the connection itself stays open (keep-alive).
        while not received.endswith(b"\r\n0\r\n\r\n") and (chunk := sock.recv(65536)):
            received += chunk
        sock.close()
    assert received.endswith(b"\r\n0\r\n\r\n")  # the chunked response ended properly
    frames = [line for line in received.split(b"\n") if line.startswith(b"data: ")]
    last = json.loads(frames[-1][6:])
    last = last.get("payload", last)
    assert last["type"] == "server.overflow"
    resume = last["properties"]["resume"]
    ids = [int(line[4:]) for line in received.split(b"\n") if line.startswith(b"id: ")]
    assert int(resume) == max(ids)  # the last position it was sent
    with (
        thread_server(settings) as again,
        EventCollector(f"{again.url}{path}", headers={"Last-Event-ID": resume}) as resumed,
    ):
        resumed.wait_for(
            lambda f: (
                f.type == "message.part.updated"
                and f.properties["part"].get("text") == "Echo: burst 39 " + "x" * 40_000
            ),
            timeout=15,
        )


def test_frames_use_bare_newlines(server: ThreadServer) -> None:
    """The official SDK splits events on "\\n\\n" only; "\\r\\n" framing would starve it."""
    with httpx.Client(timeout=5) as http, http.stream("GET", f"{server.url}/event") as response:
        first = next(response.iter_raw())
    assert b"\r" not in first
    assert first.startswith(b"id: ") and first.endswith(b"\n\n") and b"\ndata: {" in first


def _completed_reply(sid: str) -> Callable[[Frame], bool]:
    def done(f: Frame) -> bool:
        info = f.properties.get("info") or {}
        return (
            f.type == "message.updated"
            and info.get("sessionID") == sid
            and info.get("role") == "assistant"
            and "completed" in info.get("time", {})
        )

    return done


@pytest.mark.parametrize("path", ["/event", "/global/event", "/api/event"])
def test_a_cursor_past_the_head_resumes_from_the_head_and_says_so(
    server: ThreadServer, client: httpx.Client, path: str
) -> None:
    """A ``Last-Event-ID`` this log never handed out (kept across a database reset) must not
    filter the log's events out as already sent: the stream starts at the head, says so right
    after ``server.connected``, and carries every durable event from there."""
    sid = create_session(client)["id"]
    stale = 10**15  # past any cursor a fresh log hands out, on either engine
    with EventCollector(f"{server.url}{path}", headers={"Last-Event-ID": str(stale)}) as events:
        connected, notice = events.wait_for(lambda _f: True), events.wait_for(lambda f: f.type != "server.connected")
        client.post(f"/session/{sid}/message", json=text_prompt("after a reset"))
        events.wait_for(_completed_reply(sid))
        frames = events.snapshot()
    head = int(notice.id or -1)
    assert connected.type == "server.connected" and connected.id in (str(head), None)  # None: V2's, as OpenCode's
    assert 0 < head < stale
    assert notice.type == "server.cursor.unknown"
    assert notice.properties["lastEventID"] == str(stale) and notice.properties["resume"] == str(head)
    texts = [f.properties["part"].get("text") for f in frames if f.type == "message.part.updated"]
    assert "after a reset" in texts and "Echo: after a reset" in texts
    assert all(head < int(f.id) < stale for f in frames[2:] if f.id is not None)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["/event", "/global/event"])
def test_a_stream_opened_after_a_write_answered_does_not_carry_that_write(
    server: ThreadServer, client: httpx.Client, database_url: str, path: str
) -> None:
    """On PostgreSQL a commit reaches the bus once every older transaction has ended, which may be
    after its request was answered. A stream opened after the answer starts after that write, as
    it would on one process with nothing in between: its client already has what the answer said.

    A transaction left open on another connection keeps the session's creation from the bus until
    the stream is open (without it, the window is one read of the log)."""
    older = OlderTransaction(database_url)
    try:
        sid = create_session(client)["id"]
        with EventCollector(f"{server.url}{path}") as events:
            events.wait_for(lambda f: f.type == "server.connected")
            older.end()
            assert client.patch(f"/session/{sid}", json={"title": "renamed"}).status_code == 200
            events.wait_for(lambda f: f.type == "session.updated" and f.properties["info"]["title"] == "renamed")
            frames = [json.dumps(f.data) for f in events.frames]
    finally:
        older.close()
    assert not [frame for frame in frames if "session.created" in frame]  # nor its sync twin


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_write_made_once_the_stream_answered_is_on_it(
    server: ThreadServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream takes its place (its tap, and what had committed by then) before its headers go
    out, so a write the client makes once it has them is on the stream, however long learning
    what had committed takes (slowed down here)."""
    topology = server.runtime.log.topology
    look = topology.committed_now

    async def slow_look() -> object:
        await asyncio.sleep(0.5)
        return await look()

    monkeypatch.setattr(topology, "committed_now", slow_look)
    sid = create_session(client)["id"]
    with EventCollector(f"{server.url}/event") as events:  # back once the headers are
        assert client.patch(f"/session/{sid}", json={"title": "renamed"}).status_code == 200
        events.wait_for(lambda f: f.type == "session.updated" and f.properties["info"]["title"] == "renamed", timeout=5)
