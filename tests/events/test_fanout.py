"""Fan-out to many subscribers: a subscriber over its byte limit is cut off with a frame saying
where to resume and loses nothing by resuming; one that is behind gets merged deltas with the same
text; events reach only the streams that filter for them; a waiting stream is written to in the
feed's own call."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.events import deltas
from app.events.bus import EVERYTHING, EventBus, Limits, Overflowed
from app.events.feed import Batch, Feeds, Kind
from app.events.model import Event
from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector, Frame, first_frame

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

DELTA_TYPES = ("message.part.delta", "session.next.text.delta")


class RawStream:
    """An SSE client on a raw socket with a tiny receive buffer, which reads only when told to:
    the server's buffers fill at once and events wait in its queue for this subscriber."""

    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{extra}\r\n".encode()
        )
        self.frames: list[Frame] = []
        self.ended = False  # the terminating chunk arrived: the response ended properly
        self._raw = b""
        self._body: bytes | None = None  # de-chunked bytes not yet cut into frames

    def read_until(self, done: Callable[[list[Frame]], bool], timeout: float = 30.0) -> None:
        """Read until ``done(frames)`` or the response ends (``socket.timeout`` when neither)."""
        self.sock.settimeout(timeout)
        while not done(self.frames) and not self.ended:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the connection closed without a terminating chunk")
            self._feed(data)

    def close(self) -> None:
        self.sock.close()

    def _feed(self, data: bytes) -> None:
        self._raw += data
        if self._body is None:
            head, sep, rest = self._raw.partition(b"\r\n\r\n")
            if not sep:
                return
            assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
            self._body, self._raw = b"", rest
        while not self.ended:
            size_line, sep, rest = self._raw.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line, 16)
            if len(rest) < size + 2:
                break
            self._body += rest[:size]
            self._raw = rest[size + 2 :]
            self.ended = size == 0
        while b"\n\n" in self._body:
            block, self._body = self._body.split(b"\n\n", 1)
            frame_id: str | None = None
            for line in block.split(b"\n"):
                if line.startswith(b"id: "):
                    frame_id = line[4:].decode()
                elif line.startswith(b"data: "):
                    self.frames.append(Frame(frame_id, json.loads(line[6:])))


def event_id(frame: Frame) -> str | None:
    """The id of the logged event a frame carries (a sync twin carries its event's id too)."""
    payload = frame.data.get("payload", frame.data)
    return payload.get("id")


def on_server_loop(server: ThreadServer, read: Callable[[], Any]) -> Any:
    """``read()`` run on the server's event loop (the runtime is not thread-safe)."""

    async def run() -> Any:
        return read()

    return asyncio.run_coroutine_threadsafe(run(), server.loop).result(timeout=30)


def durable_event_ids(server: ThreadServer, path: str) -> list[str]:
    """The ids of every logged event the stream at ``path`` carries, read from the log."""
    directory = server.settings.directory if path == "/event" else None
    future = asyncio.run_coroutine_threadsafe(
        server.runtime.log.since(0, limit=1_000_000, directory=directory), server.loop
    )
    return [e.id for e in future.result(timeout=30) if not (path == "/event" and e.is_next)]


def big_turn(client: httpx.Client, index: int) -> str:
    """A synchronous prompt of 100 kB on a session of its own (no compaction), whose echo streams
    back as much: about 350 kB of frames on /event, more on the others. The kernel takes up to
    about 4 MB of them for a client that does not read before the server has to queue any."""
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt(f"turn {index} " + "x" * 100_000))
    return sid


def is_idle(session_id: str) -> Callable[[Frame], bool]:
    return lambda f: f.type == "session.idle" and f.properties.get("sessionID") == session_id


@pytest.mark.parametrize("path", ["/event", "/global/event", "/api/event"])
def test_a_subscriber_over_its_byte_limit_is_cut_off_and_resumes_without_loss(settings: Settings, path: str) -> None:
    """The byte limit alone (the event limit is out of reach) cuts off a client that reads
    nothing: its last frame is ``server.overflow`` with the id to resume from, the chunked
    response ends properly, and resuming from that id yields every logged event it missed. A
    subscriber that keeps up gets everything and is never cut off."""
    settings = settings.model_copy(update={"subscriber_queue_size": 1_000_000, "subscriber_queue_bytes": 1 << 20})
    with (
        thread_server(settings) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
        EventCollector(f"{server.url}{path}") as keeper,
    ):
        keeper.wait_for(lambda f: f.type == "server.connected")
        stalled = RawStream(settings.port, path)
        stalled.read_until(lambda frames: bool(frames))  # subscribed; from now on it reads nothing
        streams = on_server_loop(server, lambda: server.runtime.feeds.streams)
        for i in range(60):  # until the stalled subscriber is cut off
            keeper.wait_for(is_idle(big_turn(client, i)), timeout=30)  # it keeps up: at most a turn behind
            if on_server_loop(server, lambda: server.runtime.feeds.streams) < streams:
                break
        stalled.read_until(lambda _frames: False)
        stalled.close()
        expected = durable_event_ids(server, path)
        assert event_id(keeper.wait_for(lambda f: event_id(f) == expected[-1], timeout=30)) == expected[-1]
        last = stalled.frames[-1]
        assert stalled.ended and last.type == "server.overflow"
        resume = last.properties["resume"]
        ids = [int(f.id) for f in stalled.frames if f.id is not None]
        assert last.id == resume and int(resume) == max(ids)  # the furthest position it was sent
        with EventCollector(f"{server.url}{path}", headers={"Last-Event-ID": resume}) as resumed:
            resumed.wait_for(lambda f: event_id(f) == expected[-1], timeout=30)
    before = {event_id(f) for f in stalled.frames}
    assert not set(expected) <= before  # it really was cut off before the end
    assert set(expected) <= before | {event_id(f) for f in resumed.frames}
    assert set(expected) <= {event_id(f) for f in keeper.frames}
    assert all(f.type != "server.overflow" for f in keeper.frames)


def delta_texts(frames: list[Frame]) -> tuple[dict[tuple[str, str], str], int]:
    """Each streamed part's text put together from its deltas, and how many delta frames came."""
    texts: dict[tuple[str, str], str] = {}
    count = 0
    for frame in frames:
        if frame.type in DELTA_TYPES:
            props: dict[str, Any] = frame.properties
            key = (frame.type, props.get("partID") or props["textID"])
            texts[key] = texts.get(key, "") + props["delta"]
            count += 1
    return texts, count


@pytest.mark.parametrize("path", ["/event", "/api/event"])
def test_a_reader_that_is_behind_gets_merged_deltas_with_the_same_text(settings: Settings, path: str) -> None:
    """A reader that pauses while long replies stream ends with exactly the text of a reader that
    keeps up, from fewer delta frames."""
    settings = settings.model_copy(update={"subscriber_queue_bytes": 64 << 20})  # no cut-off here
    with (
        thread_server(settings) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
        EventCollector(f"{server.url}{path}") as fast,
    ):
        fast.wait_for(lambda f: f.type == "server.connected")
        slow = RawStream(settings.port, path)
        slow.read_until(lambda frames: bool(frames))
        turns = 24  # megabytes beyond what the kernel buffers for it: the server queues the rest
        last = [big_turn(client, i) for i in range(turns)][-1]
        slow.read_until(lambda frames: any(map(is_idle(last), frames)), timeout=60)
        fast.wait_for(is_idle(last), timeout=60)
        slow.close()
    fast_texts, fast_count = delta_texts(fast.snapshot())
    slow_texts, slow_count = delta_texts(slow.frames)
    assert all(f.type != "server.overflow" for f in slow.frames)
    assert slow_texts == fast_texts
    kinds = {kind for kind, _part in fast_texts}
    assert kinds == ({"message.part.delta", *(["session.next.text.delta"] if path == "/api/event" else [])})
    for kind in kinds:
        expected = sorted(f"Echo: turn {i} " + "x" * 100_000 for i in range(turns))
        assert sorted(t for (k, _p), t in fast_texts.items() if k == kind) == expected
    assert slow_count < fast_count


def mentions(frames: list[Frame], session_id: str) -> bool:
    return any(session_id in json.dumps(f.data) for f in frames)


def test_events_reach_only_the_streams_that_filter_for_them(server: ThreadServer, tmp_path: Path) -> None:
    """/event sees its directory's sessions only, a session's V2 stream that session only, and
    /global/event and /api/event everything."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        EventCollector(f"{server.url}/event") as here,
        EventCollector(f"{server.url}/event?directory={other}") as there,
        EventCollector(f"{server.url}/global/event") as everything,
        EventCollector(f"{server.url}/api/event") as everything_v2,
    ):
        mine, sibling = create_session(client)["id"], create_session(client)["id"]
        theirs = client.post("/session", params={"directory": str(other)}).json()["id"]
        with EventCollector(f"{server.url}/api/session/{mine}/event") as one_session:
            for sid in (sibling, theirs, mine):  # ``mine`` last: when its turn ends the others' have
                client.post(f"/session/{sid}/message", json=text_prompt(f"routed {sid}"))
            one_session.wait_for(lambda f: f.type == "session.next.step.ended", timeout=15)
            for stream in (here, everything, everything_v2):
                stream.wait_for(is_idle(mine))
            there.wait_for(is_idle(theirs))
    assert mentions(here.frames, mine) and mentions(here.frames, sibling) and not mentions(here.frames, theirs)
    assert mentions(there.frames, theirs) and not mentions(there.frames, mine) and not mentions(there.frames, sibling)
    for stream in (everything, everything_v2):
        assert all(mentions(stream.frames, sid) for sid in (mine, sibling, theirs))
    assert {f.data["durable"]["aggregateID"] for f in one_session.frames if "durable" in f.data} == {mine}
    assert not mentions(one_session.frames, sibling) and not mentions(one_session.frames, theirs)


def bus_of(settings: Settings, **limits: int) -> EventBus:
    settings = settings.model_copy(update=limits)
    return EventBus(settings.subscriber_queue_size, settings.subscriber_queue_bytes)


def test_the_bus_offers_an_event_only_to_the_subscribers_of_its_route(settings: Settings) -> None:
    """Routes are an index, not a filter run on everyone: a subscriber of another directory or
    session is never even asked (its ``accept`` is not called)."""
    bus = bus_of(settings)
    asked: dict[str, int] = {}

    def counting(name: str) -> Callable[[Event], bool]:
        def accept(_event: Event) -> bool:
            asked[name] = asked.get(name, 0) + 1
            return True

        return accept

    subscriptions = {
        "a": bus.subscribe(counting("a"), directory="/a"),
        "b": bus.subscribe(counting("b"), directory="/b"),
        "s1": bus.subscribe(counting("s1"), session="ses_1"),
        "all": bus.subscribe(counting("all")),
    }
    bus.publish(Event("x", {}, session_id="ses_1", directory="/a"))
    bus.publish(Event("x", {}, session_id="ses_2", directory="/a"))
    bus.publish(Event("x", {}, session_id="ses_3", directory="/b"))
    bus.publish(Event("x", {}))  # neither directory nor session: only those taking everything
    assert asked == {"a": 2, "b": 1, "s1": 1, "all": 4}
    assert {name: s.backlog for name, s in subscriptions.items()} == asked
    subscriptions["a"].close()
    bus.publish(Event("x", {}, directory="/a"))
    assert asked["a"] == 2 and bus.subscriber_count == 3


def test_a_session_is_watched_by_subscribers_of_everything_its_directory_or_itself(settings: Settings) -> None:
    """``watched`` says whether anyone would be offered the session's events (then the part a
    streamed delta opens is committed at once, app/runtime/turn/_recorder.py)."""
    bus = bus_of(settings)
    assert not bus.watched(session="s", directory="/d")
    scopes: tuple[dict[str, Any], ...] = ({"session": "s"}, {"directory": "/d"}, {})
    for on in scopes:
        subscription = bus.subscribe(**on)
        assert bus.watched(session="s", directory="/d"), on
        assert bus.watched(session="other", directory="/elsewhere") == (on == {})
        subscription.close()
    assert not bus.watched(session="s", directory="/d")


@pytest.mark.asyncio
async def test_the_byte_limit_cuts_a_subscriber_off_and_releases_what_it_held(settings: Settings) -> None:
    bus = bus_of(settings, subscriber_queue_bytes=1000)
    slow = bus.subscribe(weigh=lambda e: len(e.properties_json()))
    fast = bus.subscribe(weigh=lambda e: len(e.properties_json()))
    bus.publish(Event("x", {"text": "y" * 2000}))  # one event over the limit still fits an empty queue
    assert slow.backlog == 1 and slow.backlog_bytes > 1000
    assert await fast.next(timeout=1) is not None
    bus.publish(Event("x", {"text": "small"}))
    assert slow.overflowed and slow.backlog == 0 and slow.backlog_bytes == 0
    assert not fast.overflowed and fast.backlog == 1 and bus.subscriber_count == 1
    with pytest.raises(Overflowed):
        await slow.next(timeout=1)


def delta(part: str, text: str) -> Event:
    props = {"sessionID": "s", "messageID": "m", "partID": part, "field": "text", "delta": text}
    return Event("message.part.delta", props)


def next_delta(part: str, text: str) -> Event:
    props = {"timestamp": 1, "sessionID": "s", "assistantMessageID": "m", "textID": part, "delta": text}
    return Event("session.next.text.delta", props)


@pytest.mark.usefixtures("database_url")
def test_deltas_handed_out_together_merge_into_one_per_run() -> None:
    """A delta joins an earlier one of its target, passing over deltas of other targets (the V2
    twin) but never over any other event; the merged delta is the last one with the texts joined."""
    updated = Event("message.part.updated", {"part": {"id": "p2"}}, durable=True, cursor=7)
    events = [delta("p1", "a"), next_delta("p1", "a"), delta("p1", "b"), next_delta("p1", "b")]
    events += [delta("p1", "c"), updated, delta("p1", "d"), delta("p2", "e"), delta("p2", "f")]
    merged = deltas.coalesce(events)
    assert [(e.type, e.properties["delta"]) for e in merged if e is not updated] == [
        ("message.part.delta", "abc"),  # passed over the V2 twins, not over ``updated``
        ("session.next.text.delta", "ab"),
        ("message.part.delta", "d"),
        ("message.part.delta", "ef"),
    ]
    assert merged[2] is updated
    first = merged[0]
    assert first.id == events[4].id and first.cursor == events[4].cursor and not first.durable


@pytest.mark.asyncio
async def test_streams_of_one_kind_and_route_share_one_feed(settings: Settings) -> None:
    """The bus sees one subscriber; an event is encoded once and every stream gets the very same
    batch; a stream that joins gets only what is published after it joined."""
    bus = bus_of(settings)
    feeds = Feeds(bus, interval=3600)
    rendered: list[str] = []

    def render(event: Event) -> bytes:
        rendered.append(event.type)
        return b"data: %s\n\n" % event.type.encode()

    def kind() -> Kind:
        return Kind(lambda _e: True, lambda e: e.encoded("k", render), lambda e: e.cursor, lambda: b"")

    first, second = feeds.join("k", EVERYTHING, kind), feeds.join("k", EVERYTHING, kind)
    bus.publish(Event("one", {}))
    late = feeds.join("k", EVERYTHING, kind)  # "one" was published before it came
    bus.publish(Event("two", {}))
    assert bus.subscriber_count == 1 and feeds.streams == 3
    ones = await first.take()
    assert [b.chunk for b in ones] == [b"data: one\n\n"]
    twos = await first.take()
    assert [b.chunk for b in twos] == [b"data: two\n\n"]
    assert await second.take() == ones + twos  # the same batches, not copies
    assert await late.take() == twos
    assert rendered == ["one", "two"]
    for tap in (first, second, late):
        tap.close()
    assert bus.subscriber_count == 0 and feeds.streams == 0


@pytest.mark.asyncio
async def test_a_stream_waiting_for_batches_is_not_cut_off_however_much_piles_up(settings: Settings) -> None:
    """Batches that pile up before a waiting stream's task runs again (a busy loop) are not its
    client's fault: it gets them all. A stream busy writing (its client not reading) is cut off."""
    bus = bus_of(settings, subscriber_queue_bytes=1000)
    feeds = Feeds(bus, interval=3600)
    kind = Kind(lambda _e: True, lambda e: bytes(e.properties_json()), lambda e: e.cursor, lambda: b"")
    waiting, busy = feeds.join("k", EVERYTHING, lambda: kind), feeds.join("k", EVERYTHING, lambda: kind)
    taking = asyncio.ensure_future(waiting.take())
    await asyncio.sleep(0)  # ``waiting`` waits for batches; ``busy`` is writing, not taking
    batches = [kind.batch([Event("x", {"text": "y" * 800, "n": n})]) for n in range(3)]
    for batch in batches:  # handed out before the loop comes round to ``waiting`` again
        waiting.push(batch, bus.limits)
        busy.push(batch, bus.limits)
    assert await taking == batches and not waiting.overflowed
    assert busy.overflowed
    waiting.close()


@pytest.mark.usefixtures("database_url")
def test_a_batch_ends_with_the_event_after_which_its_streams_end() -> None:
    """What follows such an event in the same batch (a share's revoke, a dispose) is not sent:
    the stream's last frame is that event's, and its position the one to resume from."""
    kind = Kind(
        lambda _e: True, lambda e: b"<%s>" % e.type.encode(), lambda e: e.cursor, lambda: b"", lambda e: e.type == "end"
    )
    events = [Event(name, {}, durable=True, cursor=n) for n, name in enumerate(("before", "end", "after"), 1)]
    batch = kind.batch(events)
    assert batch.last and batch.chunk == b"<before><end>" and batch.events == events[:2] and batch.position == 2
    assert not kind.batch(events[2:]).last


@pytest.mark.asyncio
async def test_streams_behind_by_the_same_batches_share_one_merge(settings: Settings) -> None:
    """Streams woken together take the same batches: the merge (and its encoding) is done once and
    shared, and it keeps every delta's text; different batches are merged anew."""
    bus = bus_of(settings)
    feeds = Feeds(bus, interval=3600)
    encoded: list[str] = []

    def render(event: Event) -> bytes:
        encoded.append(event.type)
        return b"data: %s\n\n" % json.dumps(event.properties).encode()

    kind = Kind(lambda _e: True, lambda e: e.encoded("k", render), lambda e: e.cursor, lambda: b"")
    taps = [feeds.join("k", EVERYTHING, lambda: kind) for _ in range(3)]
    first, second = kind.batch([delta("p", "Hel")]), kind.batch([delta("p", "lo")])
    for tap in taps:
        tap.push(first, bus.limits)
        tap.push(second, bus.limits)
    taken = [await tap.take() for tap in taps]
    assert all(batches == [first, second] for batches in taken)
    encoded.clear()
    merged = [tap.merged(batches) for tap, batches in zip(taps, taken, strict=True)]
    assert merged[0] is merged[1] is merged[2]
    assert [e.properties["delta"] for e in merged[0].events] == ["Hello"]
    assert encoded == ["message.part.delta"]  # encoded once for the three streams
    other = taps[0].merged([second, first])
    assert other is not merged[0] and [e.properties["delta"] for e in other.events] == ["loHel"]
    for tap in taps:
        tap.close()


def stream_count(server: ThreadServer) -> int:
    return int(on_server_loop(server, lambda: server.runtime.feeds.streams))


def test_a_client_that_goes_away_releases_its_stream_and_shutdown_ends_the_others(settings: Settings) -> None:
    """A dropped connection leaves its feed (nothing is kept for it); at shutdown every open
    stream ends with the terminating chunk instead of keeping the server waiting."""
    with thread_server(settings) as server:
        first_frame(f"{server.url}/event")  # connects, reads one frame, drops the connection
        deadline = time.monotonic() + 30
        while stream_count(server) and time.monotonic() < deadline:  # the server notices soon
            time.sleep(0.02)
        assert stream_count(server) == 0
        open_stream = RawStream(settings.port, "/global/event")
        open_stream.read_until(lambda frames: bool(frames))
        assert stream_count(server) == 1
    open_stream.read_until(lambda _frames: False)
    assert open_stream.ended
    open_stream.close()


def test_a_stream_whose_client_stops_reading_is_dropped_after_the_send_timeout(settings: Settings) -> None:
    """No byte limit in reach here: a client that stops reading blocks the stream's write, and
    once a write has waited longer than ``stream_send_timeout`` the connection is dropped (without
    the terminating chunk) and the stream released."""
    settings = settings.model_copy(update={"subscriber_queue_bytes": 1 << 30, "stream_send_timeout": 0.5})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        stalled = RawStream(settings.port, "/event")
        stalled.read_until(lambda frames: bool(frames))  # subscribed; from now on it reads nothing
        for i in range(60):  # about 21 MB: the kernel's buffers (about 4 MB) fill many times over
            big_turn(client, i)
            if stream_count(server) == 0:
                break
        # The turns may all finish before the blocked write has waited out the timeout (a fast
        # machine): give it that long, and some.
        deadline = time.monotonic() + 30
        while stream_count(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stream_count(server) == 0
        with pytest.raises((EOFError, ConnectionResetError)):
            stalled.read_until(lambda _frames: False)
        assert not stalled.ended
        stalled.close()


@pytest.mark.asyncio
async def test_a_waiting_stream_writes_each_batch_in_the_feeds_own_call(settings: Settings) -> None:
    """While a stream waits with nothing queued its batches go straight to its sink, without
    waking it; once the sink cannot write, the stream wakes and later batches queue for it."""
    bus = bus_of(settings)
    feeds = Feeds(bus, interval=3600)
    kind = Kind(lambda _e: True, lambda e: bytes(e.properties_json()), lambda e: e.cursor, lambda: b"")
    tap = feeds.join("k", EVERYTHING, lambda: kind)
    written: list[Batch] = []
    can_write = True

    def sink(batch: Batch) -> bool:
        written.append(batch)
        return can_write

    taking = asyncio.ensure_future(tap.take(sink))
    await asyncio.sleep(0)
    first, second, third = (kind.batch([Event("x", {"n": n})]) for n in range(3))
    tap.push(first, bus.limits)
    await asyncio.sleep(0)
    assert written == [first] and not taking.done()  # written in push; the stream sleeps on
    can_write = False
    tap.push(second, bus.limits)  # the sink has to wait: the stream is woken to finish it
    tap.push(third, bus.limits)  # meanwhile the stream is busy: this one is queued
    assert written == [first, second]
    assert await taking == [third]
    tap.close()


@pytest.mark.asyncio
async def test_the_bytes_a_stream_is_still_writing_count_against_its_byte_limit(settings: Settings) -> None:
    """A client that stops reading leaves the stream's last write waiting; those bytes are held
    as long as the queued ones. So with 60 of a 100-byte limit in a write that has not finished,
    the next 50 bytes cut the stream off, whether the stream took the batch itself or the feed's
    call began the write; once the stream is back for more, its earlier writes no longer count."""
    bus = bus_of(settings)
    feeds = Feeds(bus, interval=3600)
    kind = Kind(lambda _e: True, lambda e: bytes(e.properties_json()), lambda e: e.cursor, lambda: b"")
    limits = Limits(max_events=1000, max_bytes=100)

    def sized(size: int) -> Batch:
        return kind.batch([Event("x", {})], chunk=b"x" * size)

    taken = feeds.join("k", EVERYTHING, lambda: kind)
    taken.push(sized(60), limits)
    assert [len(b.chunk) for b in await taken.take()] == [60]  # now writing it, not waiting
    taken.push(sized(50), limits)
    assert taken.overflowed

    sunk = feeds.join("k", EVERYTHING, lambda: kind)
    waiting = asyncio.ensure_future(sunk.take(lambda _batch: False))  # the write has to wait
    await asyncio.sleep(0)
    sunk.push(sized(60), limits)
    assert await waiting == []  # the stream is woken to finish that write
    sunk.push(sized(50), limits)
    assert sunk.overflowed

    kept = feeds.join("k", EVERYTHING, lambda: kind)
    kept.push(sized(60), limits)
    await kept.take()
    waiting = asyncio.ensure_future(kept.take())  # back for more: the 60 bytes are written
    await asyncio.sleep(0)
    kept.push(sized(50), limits)
    assert [len(b.chunk) for b in await waiting] == [50]
    kept.push(sized(40), limits)  # 50 being written + 40 queued: within the limit
    assert not kept.overflowed
    for tap in (taken, sunk, kept):
        tap.close()


def test_disposing_an_instance_ends_its_event_streams_after_saying_so(settings: Settings, tmp_path: Path) -> None:
    """``POST /instance/dispose`` as OpenCode answers it: the directory's ``/event`` streams get
    ``server.instance.disposed`` as their last frame and end properly (a client reconnects and
    reads everything again); another directory's stream goes on; ``/global/event`` carries it,
    and ``POST /global/dispose``'s ``global.disposed``. The server goes on serving."""
    other = tmp_path / "other"
    other.mkdir()
    with (
        thread_server(settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
        EventCollector(f"{server.url}/global/event") as everywhere,
    ):
        everywhere.wait_for(lambda f: f.type == "server.connected")
        disposed = RawStream(settings.port, "/event")
        untouched = RawStream(settings.port, f"/event?directory={other}")
        for stream in (disposed, untouched):
            stream.read_until(lambda frames: bool(frames))
        assert client.post("/instance/dispose").json() is True
        deadline = time.monotonic() + 10  # a stream that goes on would read heartbeats forever
        disposed.read_until(lambda _frames: time.monotonic() > deadline)  # to the terminating chunk
        assert disposed.ended and disposed.frames[-1].type == "server.instance.disposed"
        assert disposed.frames[-1].properties == {"directory": settings.directory}
        assert client.post("/global/dispose").json() is True
        everywhere.wait_for(lambda f: f.type == "global.disposed")
        untouched.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            untouched.read_until(lambda frames: len(frames) > 1, timeout=0.5)
        assert not untouched.ended
        sid = create_session(client)["id"]  # still serving
        assert client.post(f"/session/{sid}/message", json=text_prompt("after")).status_code == 200
    wrapped = [f for f in everywhere.frames if f.type == "server.instance.disposed"]
    assert [f.data["directory"] for f in wrapped] == [settings.directory]
    assert next(f for f in everywhere.frames if f.type == "global.disposed").data["directory"] == "global"
    for stream in (disposed, untouched):
        stream.close()
