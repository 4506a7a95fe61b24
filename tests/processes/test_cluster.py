"""Several server processes on one PostgreSQL database behave, to a client, like one server:
events produced on one process stream from every other, per session in order and without gaps
or duplicates; a cursor from one process resumes on another; prompts sent to any process are
answered once each by one drain; status and abort work from any process; and when the process
draining a session is killed, another takes it over and answers every admitted prompt."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from app.store.postgres import PRESENCE_LOCKS
from tests.balancer import nginx_binary, shipped_nginx
from tests.clients.test_sdk import EXPECTED_CHECKS, EXPECTED_CHECKS_V2, FLOW, FLOW_V2, run_flow
from tests.helpers import git_repository, many_files, text_prompt, wait_until
from tests.postgres import Cluster, OlderTransaction
from tests.servers import ProcessServer, openai_stub, process_server, start_together
from tests.sse import EventCollector, Frame
from tests.tools.test_mcp import local as local_mcp_server

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster_url(postgres_cluster: Cluster | None) -> str:
    if postgres_cluster is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    return postgres_cluster.create_database()


@pytest.fixture
def two(cluster_url: str, project_dir: Path, config_dir: Path) -> Iterator[tuple[ProcessServer, ProcessServer]]:
    servers = [process_server(cluster_url, project_dir, config_dir) for _ in range(2)]
    try:
        start_together(*servers)
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
                lambda f, t=text: f.type == "message.part.updated" and f.properties["part"].get("text") == f"Echo: {t}",  # type: ignore[misc]
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


def test_a_stream_opened_on_another_process_after_an_answer_does_not_carry_what_it_wrote(
    two: tuple[ProcessServer, ProcessServer], cluster_url: str
) -> None:
    """A session created through A, then a stream opened on B: B hears of the creation only
    later (once every older transaction has ended; here one is held open meanwhile), but the
    stream was opened after it committed, so it leaves it out, as one process would."""
    a, b = two
    older = OlderTransaction(cluster_url)
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        with EventCollector(f"{b.url}/event") as on_b:
            on_b.wait_for(lambda f: f.type == "server.connected")
            older.end()
            assert httpx.patch(f"{a.url}/session/{sid}", json={"title": "renamed"}).status_code == 200
            on_b.wait_for(lambda f: f.type == "session.updated" and f.properties["info"]["title"] == "renamed")
            kinds = [f.type for f in on_b.frames]
    finally:
        older.close()
    assert "session.created" not in kinds, kinds


def _history_when(url: str, sid: str, done: Callable[[list[dict]], bool], timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    history: list[dict] = []
    while time.monotonic() < deadline:
        history = httpx.get(f"{url}/session/{sid}/message").json()
        if done(history):
            return history
        time.sleep(0.1)
    raise TimeoutError([m["info"] for m in history])


def _answered(count: int) -> Callable[[list[dict]], bool]:
    def done(history: list[dict]) -> bool:
        replies = [m for m in history if m["info"]["role"] == "assistant"]
        return len(replies) >= count and all("completed" in m["info"]["time"] for m in replies)

    return done


def _interrupted(history: list[dict]) -> bool:
    """The reply in progress was closed with an error: its session was taken over."""
    return any(m["info"]["role"] == "assistant" and "error" in m["info"] for m in history)


def _answered_without_error(history: list[dict]) -> bool:
    """A reply completed without an error (one the dead process left open ends with an error)."""
    return any(
        m["info"]["role"] == "assistant" and "completed" in m["info"]["time"] and "error" not in m["info"]
        for m in history
    )


def test_prompts_sent_to_both_processes_at_once_are_answered_once(two: tuple[ProcessServer, ProcessServer]) -> None:
    a, b = two
    sids = [httpx.post(f"{a.url}/session").json()["id"] for _ in range(3)]

    def send(url: str, sid: str, text: str) -> int:
        return httpx.post(f"{url}/session/{sid}/prompt_async", json=text_prompt(f"SLOW:0.01 {text}")).status_code

    with ThreadPoolExecutor(8) as pool:
        jobs = [
            pool.submit(send, server.url, sid, f"{name}-{i}")
            for i in range(4)
            for sid in sids
            for server, name in ((a, "a"), (b, "b"))
        ]
        assert all(job.result() == 204 for job in jobs)
    for sid in sids:
        history = _history_when(b.url, sid, _answered(8))
        users = [m for m in history if m["info"]["role"] == "user"]
        replies = [m for m in history if m["info"]["role"] == "assistant"]
        assert len(users) == 8 and len(replies) == 8, [m["info"] for m in history]
        assert sorted(r["info"]["parentID"] for r in replies) == sorted(u["info"]["id"] for u in users)
        assert all("error" not in r["info"] for r in replies)


def test_status_and_abort_work_from_the_other_process(two: tuple[ProcessServer, ProcessServer]) -> None:
    a, b = two
    sid = httpx.post(f"{a.url}/session").json()["id"]
    with EventCollector(f"{b.url}/event") as on_b:
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.5 a long answer"))
        on_b.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid, timeout=15)
        assert httpx.get(f"{b.url}/session/status").json() == {sid: {"type": "busy"}}
        assert httpx.get(f"{a.url}/session/status").json() == {sid: {"type": "busy"}}
        assert httpx.post(f"{b.url}/session/{sid}/abort").json() is True  # sent to B, drained on A
        on_b.wait_idle(sid, timeout=15)
    assert httpx.get(f"{b.url}/session/status").json() == {}
    reply = httpx.get(f"{a.url}/session/{sid}/message").json()[-1]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"


def test_permission_and_shell_from_the_other_process(two: tuple[ProcessServer, ProcessServer]) -> None:
    a, b = two
    ask_bash = [{"permission": "bash", "pattern": "*", "action": "ask"}]
    sid = httpx.post(f"{a.url}/session", json={"permission": ask_bash}).json()["id"]
    with EventCollector(f"{b.url}/event") as on_b:
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("TOOL:bash echo approved-elsewhere"))
        asked = on_b.wait_for(lambda f: f.type == "permission.asked", timeout=15).properties
        listed = httpx.get(f"{b.url}/permission").json()
        assert [r["id"] for r in listed] == [asked["id"]]  # asked on A, listed on B
        other = {"directory": "/elsewhere"}  # not the session's: B neither lists nor forwards it there
        assert httpx.get(f"{b.url}/permission", params=other).json() == []
        refused = httpx.post(f"{b.url}/permission/{asked['id']}/reply", params=other, json={"reply": "once"})
        assert refused.status_code == 404 and refused.json()["_tag"] == "PermissionNotFoundError"
        reply = httpx.post(f"{b.url}/permission/{asked['id']}/reply", json={"reply": "once"})
        assert reply.status_code == 200 and reply.json() is True
        on_b.wait_idle(sid, timeout=15)
    tools = [p for m in httpx.get(f"{a.url}/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]
    assert tools[0]["state"]["status"] == "completed" and "approved-elsewhere" in tools[0]["state"]["output"]
    assert httpx.get(f"{a.url}/permission").json() == httpx.get(f"{b.url}/permission").json() == []
    shell = httpx.post(f"{b.url}/session/{sid}/shell", json={"agent": "build", "command": "echo from-b"}, timeout=30)
    assert shell.status_code == 200, shell.text


def test_an_always_answer_reaches_every_process_at_once(two: tuple[ProcessServer, ProcessServer]) -> None:
    """Each process keeps the project's saved "always" rules it read (a step reads them); one
    saved through another process is told to it at once, well before its copy would age out
    (``MEMO_MAX_AGE_S``), so its next step runs the command without asking again."""
    a, b = two
    ask_bash = [{"permission": "bash", "pattern": "*", "action": "ask"}]
    on_a = httpx.post(f"{a.url}/session", json={"permission": ask_bash}).json()["id"]
    on_b = httpx.post(f"{b.url}/session", json={"permission": ask_bash}).json()["id"]
    with EventCollector(f"{b.url}/event") as events:
        httpx.post(f"{b.url}/session/{on_b}/prompt_async", json=text_prompt("TOOL:bash echo saved-once"))
        asked = events.wait_for(lambda f: f.type == "permission.asked", timeout=15).properties
        # Meanwhile a step on A reads the project's saved rules (none yet) and keeps them.
        assert httpx.post(f"{a.url}/session/{on_a}/message", json=text_prompt("hello"), timeout=30).status_code == 200
        reply = httpx.post(f"{b.url}/permission/{asked['id']}/reply", json={"reply": "always"})
        assert reply.status_code == 200 and reply.json() is True
        events.wait_idle(on_b, timeout=15)
    time.sleep(0.3)  # the word of the change crosses (milliseconds)
    with EventCollector(f"{a.url}/event") as events:
        events.wait_for(lambda f: f.type == "server.connected")
        ran = httpx.post(f"{a.url}/session/{on_a}/prompt_async", json=text_prompt("TOOL:bash echo saved-once"))
        assert ran.status_code == 204
        events.wait_idle(on_a, timeout=15)
        assert not [f for f in events.of_session(on_a) if f.type == "permission.asked"]
    tools = [p for m in httpx.get(f"{a.url}/session/{on_a}/message").json() for p in m["parts"] if p["type"] == "tool"]
    assert tools[-1]["state"]["status"] == "completed" and "saved-once" in tools[-1]["state"]["output"]


@pytest.mark.parametrize("end", ["kill -9", "frozen"])
def test_killing_the_draining_process_loses_nothing(
    end: str, cluster_url: str, project_dir: Path, config_dir: Path
) -> None:
    """A, draining a session mid-turn, is killed, or frozen (SIGSTOP): B answers every prompt.
    Killed, its connections end with it and B takes over at once, though its lease would hold
    for a minute; frozen, its connections stay (it may only be slow), so B takes over only once
    its 5 s lease expires, and A, thawed, writes nothing more into the session (its writes check
    the lease)."""
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    a.env["OPENSESSION_LEASE_SECONDS"] = "60" if end == "kill -9" else "5"
    start_together(a, b)
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        with EventCollector(f"{b.url}/event") as on_b:
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 interrupted answer"))
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("queued behind"))
            on_b.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid, timeout=15)
            killed_at = time.monotonic()
            assert a.proc is not None
            if end == "kill -9":
                a.kill9()
            else:
                a.proc.send_signal(signal.SIGSTOP)
            _history_when(b.url, sid, _interrupted, timeout=30)
            taken_over_in = time.monotonic() - killed_at
            history = _history_when(b.url, sid, _answered(3), timeout=30)
            if end == "frozen":
                a.proc.send_signal(signal.SIGCONT)
                time.sleep(1.0)  # A's drain goes on from where it froze, and is refused
                assert httpx.get(f"{b.url}/session/{sid}/message").json() == history
    finally:
        a.stop()
        b.stop()
    users = [m for m in history if m["info"]["role"] == "user"]
    interrupted, *answers = [m for m in history if m["info"]["role"] == "assistant"]
    assert interrupted["info"]["error"]["name"] == "MessageAbortedError"
    assert all("end" in p["time"] for p in interrupted["parts"] if p["type"] == "text")
    assert [r["info"]["parentID"] for r in answers] == [u["info"]["id"] for u in users]
    assert all("error" not in r["info"] for r in answers)
    assert taken_over_in < 15, taken_over_in
    if end == "frozen":  # renewed up to a second before it froze, silent since
        assert taken_over_in > 3.5, taken_over_in


def _sql(cluster_url: str, statement: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(cluster_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return await conn.fetch(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def test_a_reply_whose_failure_could_not_be_written_is_closed_by_the_takeover(
    two: tuple[ProcessServer, ProcessServer], cluster_url: str
) -> None:
    """A's drain fails mid-reply, and cannot write even its own failure: the database refuses
    every event of the session (as a full disk would). A keeps the lease over the reply left
    open, so when A then dies, B takes the session over and closes the reply, and the prompt
    is answered. (Had A given the lease up, B would have claimed a session with no previous
    owner and closed nothing: the reply would stay open for good.)"""
    a, b = two
    sid = httpx.post(f"{a.url}/session").json()["id"]
    refuse = f"""
        CREATE FUNCTION refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.session_id = '{sid}' THEN RAISE EXCEPTION 'could not extend file: No space left on device'; END IF;
            RETURN NEW;
        END $$"""
    with EventCollector(f"{a.url}/event") as on_a:
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.2 a reply that cannot end"))
        on_a.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid, timeout=15)
        _sql(cluster_url, refuse)
        _sql(cluster_url, "CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_events()")
    wait_until(lambda: f"drain of {sid} failed" in a.log.read_text(errors="replace"), timeout=20)
    (reply,) = [m for m in httpx.get(f"{b.url}/session/{sid}/message").json() if m["info"]["role"] == "assistant"]
    assert "completed" not in reply["info"]["time"]  # nothing could be written
    a.kill9()
    _sql(cluster_url, "DROP TRIGGER refuse ON events")
    history = _history_when(b.url, sid, _answered_without_error, timeout=30)
    user, closed, answer = history
    assert closed["info"]["id"] == reply["info"]["id"] and "completed" in closed["info"]["time"]
    assert closed["info"]["error"]["name"] == "MessageAbortedError"
    assert answer["info"]["parentID"] == user["info"]["id"] and "error" not in answer["info"]


def test_a_starting_process_leaves_a_lapsed_lease_to_a_fenced_takeover(
    cluster_url: str, project_dir: Path, config_dir: Path
) -> None:
    """A drains a session; its lease lapses (A stalled past it: here frozen, its expiry moved
    back) just as process C starts. C's start-up must not close A's reply on its own: A may still
    be alive and renew, and nothing fences a write made without the lease. Here A renews (its
    expiry moved forward) before C's watchdog would take the session over, and finishes the
    reply; it must never have been marked interrupted. (Closing it unfenced at start-up made the
    reply read interrupted, then complete; or, read open a moment before its owner completed it,
    interrupted for good.)"""
    a = process_server(cluster_url, project_dir, config_dir)
    c = process_server(cluster_url, project_dir, config_dir)
    a.env["OPENSESSION_LEASE_SECONDS"] = "60"  # its own renewals keep it; the test moves it
    a.start()
    assert a.proc is not None
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        with EventCollector(f"{a.url}/event") as on_a:
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.4 one two three four"))
            on_a.wait_for(_delta_of(sid), timeout=15)
            a.proc.send_signal(signal.SIGSTOP)
            _sql(cluster_url, "UPDATE leases SET expires_at = 0 WHERE session_id = $1", sid)
            c.start()  # its start-up finds the session with an open reply and a lapsed lease
            # Renewed as A would renew it, before C's watchdog's first round would take the
            # session over (a second after C joined the cluster, early in its start-up).
            far = int(time.time() * 1000) + 60_000
            _sql(cluster_url, "UPDATE leases SET expires_at = $2 WHERE session_id = $1", sid, far)
            a.proc.send_signal(signal.SIGCONT)
            history = _history_when(a.url, sid, _answered(1), timeout=30)
    finally:
        a.proc.send_signal(signal.SIGCONT)
        a.stop()
        c.stop()
    [reply] = [m["info"] for m in history if m["info"]["role"] == "assistant"]
    assert "error" not in reply, reply
    updates = _sql(cluster_url, "SELECT data FROM events WHERE session_id = $1 AND type = 'message.updated'", sid)
    closed = [row for row in updates if "error" in json.loads(row["data"])["info"]]
    assert not closed, "a process starting up closed a reply whose owner was alive"


def test_a_thawed_process_stops_the_shell_command_of_a_session_taken_over(
    cluster_url: str, project_dir: Path, config_dir: Path
) -> None:
    """A runs a shell command for a session and is frozen past its lease; B takes the session
    over. Thawed, A must not let the command go on changing the project (it would write a file
    seconds later): the lease it lost is noticed and the command's processes are killed."""
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    a.env["OPENSESSION_LEASE_SECONDS"] = "3"
    start_together(a, b)
    started, late = project_dir / "started.txt", project_dir / "late.txt"
    # The command's late write comes after the takeover even on a loaded machine: the lease
    # expires within 3 s of the freeze, a session hold A froze inside ends 3 s after it took it;
    # and A, thawed, has 3 s or more to notice before that write.
    run_for = 13.0
    try:
        assert a.proc is not None
        sid = httpx.post(f"{a.url}/session").json()["id"]
        command = f"touch started.txt; sleep {run_for:g}; echo late > late.txt"
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(f"TOOL:bash {command}"))
        deadline = time.monotonic() + 15
        while not started.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        started_at = time.monotonic()
        a.proc.send_signal(signal.SIGSTOP)
        # B closes A's reply with an error, then answers the prompt (after the failed call). Had
        # A frozen inside a write transaction, PostgreSQL ends it after the lease's length and
        # with it the session's hold that B's claim waits on.
        history = _history_when(b.url, sid, lambda h: _interrupted(h) and _answered_without_error(h), timeout=15)
        assert time.monotonic() - started_at < run_for - 3.0, "taken over too late for the test to tell"
        a.proc.send_signal(signal.SIGCONT)
        time.sleep(max(0.0, started_at + run_for + 1.5 - time.monotonic()))  # past the command's write
        assert not late.exists(), f"the thawed process's command went on after a takeover; its log:\n{a.log_tail()}"
        assert httpx.get(f"{b.url}/session/{sid}/message").json() == history  # and A wrote nothing
        assert httpx.get(f"{a.url}/session/status").json() == {}  # nor says it drains the session
    finally:
        if a.proc is not None:
            a.proc.send_signal(signal.SIGCONT)
        a.stop()
        b.stop()
    [tool] = [p for m in history for p in m["parts"] if p["type"] == "tool"]
    assert tool["state"]["status"] == "error", tool["state"]


def test_a_process_whose_listening_connection_broke_keeps_its_sessions(
    two: tuple[ProcessServer, ProcessServer], cluster_url: str
) -> None:
    """The connection A listens on (which also says that A is connected) is cut mid-turn, again
    and again: A is still heard from, so B takes nothing over, and A's reply ends as usual."""
    a, _ = two
    assert a.proc is not None
    sid = httpx.post(f"{a.url}/session").json()["id"]
    with EventCollector(f"{a.url}/event") as on_a:
        slow = text_prompt("SLOW:0.8 one two three four five six seven")
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=slow)
        on_a.wait_for(_delta_of(sid), timeout=15)

        async def cut() -> int:
            """Cut A's listening connection again and again for 5 s (it reconnects each second)."""
            conn = await asyncpg.connect(cluster_url.replace("postgresql+asyncpg://", "postgresql://"))
            cuts = 0
            try:
                for _ in range(25):
                    ended = await conn.fetch(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1",
                        f"opensession listener {a.proc.pid}-%",  # type: ignore[union-attr]
                    )
                    cuts += len(ended)
                    await asyncio.sleep(0.2)
            finally:
                await conn.close()
            return cuts

        assert asyncio.run(cut()) >= 2
        history = _history_when(a.url, sid, _answered(1), timeout=30)
        time.sleep(1.0)  # a takeover would have closed the reply and answered it again by now
        history = httpx.get(f"{a.url}/session/{sid}/message").json()
    [reply] = [m for m in history if m["info"]["role"] == "assistant"]  # not taken over and answered anew
    assert "error" not in reply["info"], reply["info"]
    assert "seven" in "".join(p.get("text", "") for p in reply["parts"])


def _delta_of(session_id: str) -> Callable[[Frame], bool]:
    return lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == session_id


def test_sigterm_hands_the_sessions_off_at_once(cluster_url: str, project_dir: Path, config_dir: Path) -> None:
    """A rolling restart: SIGTERM on the process draining a session mid-turn. With leases of a
    minute, only the hand-off explains the other process answering within seconds; a synchronous
    prompt in flight on the stopping process is answered (by the other), not failed."""
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    for server in (a, b):
        server.env["OPENSESSION_LEASE_SECONDS"] = "60"
    start_together(a, b)
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        waiting = httpx.post(f"{a.url}/session").json()["id"]
        with ThreadPoolExecutor(1) as pool, EventCollector(f"{b.url}/event") as on_b:
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 handed off answer"))
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt("queued behind"))
            sync = pool.submit(
                httpx.post, f"{a.url}/session/{waiting}/message", json=text_prompt("SLOW:0.3 asked of a"), timeout=30
            )
            for session in (sid, waiting):
                on_b.wait_for(_delta_of(session))
            stopped_at = time.monotonic()
            assert a.proc is not None
            a.proc.terminate()
            history = _history_when(b.url, sid, _answered(3), timeout=30)
            answered_in = time.monotonic() - stopped_at
            replied = sync.result(timeout=30)
        assert a.proc.wait(timeout=15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
    finally:
        a.stop()
        b.stop()
    assert answered_in < 30, answered_in  # the leases would have kept the sessions for 60 s
    users = [m for m in history if m["info"]["role"] == "user"]
    interrupted, *answers = [m for m in history if m["info"]["role"] == "assistant"]
    assert interrupted["info"]["error"]["name"] == "MessageAbortedError"
    assert [r["info"]["parentID"] for r in answers] == [u["info"]["id"] for u in users]
    assert all("error" not in r["info"] for r in answers)
    assert replied.status_code == 200, replied.text
    assert "error" not in replied.json()["info"], replied.json()["info"]
    assert "asked of a" in "".join(p.get("text", "") for p in replied.json()["parts"])


def test_undo_after_failover_restores_the_files(
    cluster_url: str, project_dir: Path, config_dir: Path, tmp_path: Path
) -> None:
    """Two machines (data directories of their own) sharing the project: a step drained by A
    wrote a file, A dies, and a revert through B puts the file back as it was. The snapshots are
    beside the project, so B has them."""
    (project_dir / "notes.txt").write_text("before\n")
    git_repository(project_dir)
    a = process_server(cluster_url, project_dir, config_dir, data_dir=tmp_path / "machine-a")
    b = process_server(cluster_url, project_dir, config_dir, data_dir=tmp_path / "machine-b")
    start_together(a, b)
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        write = "TOOL:write " + json.dumps({"filePath": "notes.txt", "content": "after\n"})
        assert httpx.post(f"{a.url}/session/{sid}/message", json=text_prompt(write), timeout=30).status_code == 200
        assert (project_dir / "notes.txt").read_text() == "after\n"
        a.kill9()
        user = httpx.get(f"{b.url}/session/{sid}/message").json()[0]["info"]["id"]
        reverted = httpx.post(f"{b.url}/session/{sid}/revert", json={"messageID": user}, timeout=30)
        assert reverted.status_code == 200, reverted.text
        assert reverted.json()["revert"]["messageID"] == user
        assert (project_dir / "notes.txt").read_text() == "before\n"
        assert not (tmp_path / "machine-b" / "snapshot").exists()  # nothing of it stranded on a node
    finally:
        a.stop()
        b.stop()


# -- behind nginx (deploy/nginx.conf, the file docker-compose.yml uses) ----------------------------


@pytest.fixture
def balanced(two: tuple[ProcessServer, ProcessServer], tmp_path: Path) -> Iterator[str]:
    """nginx on a loopback port, round-robin over the two processes; yields its URL."""
    nginx = nginx_binary()
    if nginx is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed: .ci/run installs it (apt-get install nginx)")
        pytest.skip("nginx is not installed here (apt-get install nginx)")
    with shipped_nginx(nginx, [urlsplit(s.url).netloc for s in two], tmp_path / "nginx") as balancer:
        yield balancer.url


def test_official_sdk_flows_through_nginx(balanced: str) -> None:
    run_flow(FLOW, balanced, EXPECTED_CHECKS)
    run_flow(FLOW_V2, balanced, EXPECTED_CHECKS_V2)


def test_a_rolling_restart_behind_nginx_fails_no_request(
    two: tuple[ProcessServer, ProcessServer], balanced: str
) -> None:
    """Clients keep creating sessions, prompting and reading through nginx while one replica gets
    SIGTERM and another takes its place: every request succeeds and every prompt is answered."""
    stop = threading.Event()
    failures: list[str] = []
    prompted: list[str] = []

    def client() -> None:
        deadline = time.monotonic() + 60  # bounded, well past the restarts
        with httpx.Client(base_url=balanced, timeout=30) as http:
            while not stop.is_set() and time.monotonic() < deadline:
                # Paced: requests span both restarts (400 unpaced rounds could end before the
                # second), and the sessions checked at the end stay a few hundred.
                time.sleep(0.05)
                try:
                    created = http.post("/session")
                    sid = created.json()["id"] if created.status_code == 200 else None
                    sent = http.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.05 rolling"))
                    listed = http.get(f"/session/{sid}/message")
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))
                    continue
                for response, expected in ((created, 200), (sent, 204), (listed, 200)):
                    if response.status_code != expected:
                        failures.append(f"{response.request.method} {response.request.url.path}: {response.text}")
                prompted.append(str(sid))

    with ThreadPoolExecutor(2) as pool:
        clients = [pool.submit(client) for _ in range(2)]
        time.sleep(1.0)
        a, b = two
        assert a.proc is not None
        a.proc.terminate()
        a.proc.wait(timeout=15)
        a.start()  # the replacement, at the same address
        time.sleep(4.0)  # nginx skips a replica for 2 s after it refused a connection
        assert b.proc is not None
        b.proc.terminate()
        b.proc.wait(timeout=15)
        b.start()
        time.sleep(1.0)
        stop.set()
        for done in clients:
            done.result()
    assert not failures, (failures[:3], [s.url for s in two], a.log_tail(5), b.log_tail(5))
    assert len(prompted) > 20, len(prompted)
    for sid in prompted:
        _history_when(balanced, sid, _answered(1), timeout=30)


@pytest.mark.slow
def test_a_synchronous_prompt_outlasting_a_rolling_restart_is_answered_through_nginx(
    two: tuple[ProcessServer, ProcessServer], balanced: str
) -> None:
    """A synchronous prompt whose turn outlasts its replica's graceful stop (5 s; the reply takes
    about 12 s, and each stop hands the turn to the other replica, which streams it again). The
    stopping replica drops a request a proxy passed it, as a dead one would, and nginx passes it
    to the other replica, whose Idempotency-Key lookup finds the prompt admitted and answers its
    reply: the client sees one 200, not the 503 a client reached directly gets."""
    with httpx.Client(base_url=balanced, timeout=120) as http:
        sid = http.post("/session").json()["id"]
        with ThreadPoolExecutor(1) as pool:
            prompt = text_prompt("SLOW:3 a slow reply")
            answer = pool.submit(http.post, f"/session/{sid}/message", json=prompt)
            time.sleep(1.0)
            for server in two:  # a rolling restart: the request is on one of them
                assert server.proc is not None
                server.proc.terminate()
                server.proc.wait(timeout=30)
                server.start()
                time.sleep(2.5)  # nginx skips a replica for 2 s after it refused a connection
            reply = answer.result(timeout=120)
        assert reply.status_code == 200, reply.text
        assert reply.json()["info"]["role"] == "assistant", reply.text
        assert "completed" in reply.json()["info"]["time"], reply.text  # the whole reply, not a cut one
        users = [m for m in http.get(f"/session/{sid}/message").json() if m["info"]["role"] == "user"]
        assert len(users) == 1, users  # admitted once, though sent twice or three times


def _owner(cluster_url: str, sid: str) -> int:
    """The pid of the process that holds the session's lease."""

    async def read() -> str:
        conn = await asyncpg.connect(cluster_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return str(await conn.fetchval("SELECT owner FROM leases WHERE session_id = $1", sid))
        finally:
            await conn.close()

    return int(asyncio.run(read()).split("-")[0])


def test_killing_a_replica_behind_nginx_mid_turn_loses_nothing(
    two: tuple[ProcessServer, ProcessServer], balanced: str, cluster_url: str
) -> None:
    sid = httpx.post(f"{balanced}/session").json()["id"]
    seen: list[str] = []
    with EventCollector(f"{balanced}/event") as events:
        httpx.post(f"{balanced}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.3 cut short"))
        httpx.post(f"{balanced}/session/{sid}/prompt_async", json=text_prompt("asked after"))
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid, timeout=15)
        owner = _owner(cluster_url, sid)
        victim = next(s for s in two if s.proc is not None and s.proc.pid == owner)
        victim.kill9()
        seen = [f.id for f in events.frames if f.id is not None]
    # The stream may have been on the killed replica: resume through nginx from the last id seen.
    with EventCollector(f"{balanced}/event", headers={"Last-Event-ID": seen[-1]}) as resumed:
        history = _history_when(balanced, sid, _answered(3), timeout=30)
        resumed.wait_for(
            lambda f: f.type == "message.part.updated" and f.properties["part"].get("text") == "Echo: asked after",
            timeout=15,
        )
    users = [m for m in history if m["info"]["role"] == "user"]
    interrupted, *answers = [m for m in history if m["info"]["role"] == "assistant"]
    assert interrupted["info"]["error"]["name"] == "MessageAbortedError"
    assert [r["info"]["parentID"] for r in answers] == [u["info"]["id"] for u in users]


def test_a_synchronous_prompt_whose_replica_is_killed_is_admitted_once(
    two: tuple[ProcessServer, ProcessServer], balanced: str, cluster_url: str
) -> None:
    """A synchronous prompt through nginx; the replica that admitted it is killed while it waits
    for the reply. nginx passes the POST to the other replica (the shipped configuration retries
    POSTs), with the same Idempotency-Key: that replica answers the prompt already admitted and
    does not admit it a second time."""
    sid = httpx.post(f"{balanced}/session").json()["id"]
    with EventCollector(f"{balanced}/event") as events, ThreadPoolExecutor(1) as pool:
        events.wait_for(lambda f: f.type == "server.connected")
        sent = pool.submit(
            httpx.post, f"{balanced}/session/{sid}/message", json=text_prompt("SLOW:0.3 only once"), timeout=60
        )
        events.wait_for(_delta_of(sid), timeout=15)
        owner = _owner(cluster_url, sid)
        next(s for s in two if s.proc is not None and s.proc.pid == owner).kill9()
        replied = sent.result(timeout=60)
    assert replied.status_code == 200, replied.text
    history = _history_when(balanced, sid, _answered(2), timeout=30)
    [user] = [m for m in history if m["info"]["role"] == "user"]
    assert replied.json()["info"]["parentID"] == user["info"]["id"]
    assert "error" not in replied.json()["info"], replied.json()["info"]


def test_a_shell_command_whose_replica_is_killed_runs_once(
    two: tuple[ProcessServer, ProcessServer], balanced: str, cluster_url: str, project_dir: Path
) -> None:
    """A user shell command through nginx; the replica running it is killed mid-command. nginx
    passes the POST to the other replica with the same Idempotency-Key: that replica does not run
    the command again, but answers the first run's reply once the session's takeover has closed
    it."""
    sid = httpx.post(f"{balanced}/session").json()["id"]
    runs = project_dir / "runs.txt"
    body = {"agent": "build", "command": "echo ran >> runs.txt; sleep 30"}
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(httpx.post, f"{balanced}/session/{sid}/shell", json=body, timeout=60)
        deadline = time.monotonic() + 15
        while not runs.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        owner = _owner(cluster_url, sid)
        next(s for s in two if s.proc is not None and s.proc.pid == owner).kill9()
        replied = sent.result(timeout=60)
    assert replied.status_code == 200, replied.text
    reply = replied.json()
    assert reply["info"]["error"]["name"] == "MessageAbortedError", reply["info"]
    assert reply["parts"][-1]["state"]["status"] == "error", reply["parts"][-1]
    history = httpx.get(f"{balanced}/session/{sid}/message").json()
    assert [m["info"]["id"] for m in history if m["info"]["role"] == "assistant"] == [reply["info"]["id"]]
    assert runs.read_text() == "ran\n"


def test_questions_are_answered_from_the_other_process(two: tuple[ProcessServer, ProcessServer]) -> None:
    """Asked on A (whose tool waits), listed and answered on B: the reply is forwarded to A; a
    second reply, and a dismissal of a later question, go the same way."""
    a, b = two
    question = {"question": "Colour?", "header": "Colour", "options": [{"label": "Red", "description": "warm"}]}
    prompt = "TOOL:question " + json.dumps({"questions": [question]})
    sid = httpx.post(f"{a.url}/session").json()["id"]
    with EventCollector(f"{b.url}/event") as on_b:
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(prompt))
        asked = on_b.wait_for(lambda f: f.type == "question.asked", timeout=15).properties
        assert [q["id"] for q in httpx.get(f"{b.url}/question").json()] == [asked["id"]]
        reply = httpx.post(f"{b.url}/question/{asked['id']}/reply", json={"answers": [["Red"]]})
        assert reply.status_code == 200 and reply.json() is True
        on_b.wait_for(lambda f: f.type == "question.replied", timeout=15)
        on_b.wait_idle(sid, timeout=15)
        again = httpx.post(f"{b.url}/question/{asked['id']}/reply", json={"answers": [["Red"]]})
        assert again.status_code == 404 and again.json()["_tag"] == "QuestionNotFoundError"
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(prompt))
        second = on_b.wait_for(lambda f: f.type == "question.asked" and f.properties["id"] != asked["id"], timeout=15)
        assert httpx.post(f"{b.url}/question/{second.properties['id']}/reject").json() is True
        on_b.wait_for(lambda f: f.type == "question.rejected", timeout=15)
    tools = [p for m in httpx.get(f"{a.url}/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]
    assert tools[0]["state"]["status"] == "completed" and '"Colour?"="Red"' in tools[0]["state"]["output"]
    assert tools[1]["state"]["error"] == "The user dismissed this question"
    assert httpx.get(f"{a.url}/question").json() == httpx.get(f"{b.url}/question").json() == []


def test_a_question_dies_with_the_process_that_asked_it(cluster_url: str, project_dir: Path, config_dir: Path) -> None:
    """A is killed while its tool waits for an answer: B takes the session over (the tool fails,
    the prompt is answered again) and no longer lists the question or takes a reply to it."""
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    start_together(a, b)
    question = {"question": "Colour?", "header": "Colour", "options": [{"label": "Red", "description": "warm"}]}
    try:
        sid = httpx.post(f"{a.url}/session").json()["id"]
        with EventCollector(f"{b.url}/event") as on_b:
            prompt = "TOOL:question " + json.dumps({"questions": [question]})
            httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(prompt))
            asked = on_b.wait_for(lambda f: f.type == "question.asked", timeout=15).properties
            assert [q["id"] for q in httpx.get(f"{b.url}/question").json()] == [asked["id"]]
            a.kill9()
            history = _history_when(b.url, sid, _answered(2), timeout=30)
            listed = httpx.get(f"{b.url}/question").json()
            late = httpx.post(f"{b.url}/question/{asked['id']}/reply", json={"answers": [["Red"]]})
    finally:
        a.stop()
        b.stop()
    tool = next(p for m in history for p in m["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "error"
    assert listed == [] and late.status_code == 404


def test_a_large_permission_request_reaches_the_other_process(two: tuple[ProcessServer, ProcessServer]) -> None:
    """An edit's permission request carries the whole diff: far more than one notification holds."""
    a, b = two
    ask_edit = [{"permission": "edit", "pattern": "*", "action": "ask"}]
    sid = httpx.post(f"{a.url}/session", json={"permission": ask_edit}).json()["id"]
    content = "".join(f"line {i} of a long file written by the agent\n" for i in range(600))  # ~27 kB of diff
    call = json.dumps({"filePath": "big.txt", "content": content})
    with EventCollector(f"{b.url}/event") as on_b:
        httpx.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(f"TOOL:write {call}"))
        asked = on_b.wait_for(lambda f: f.type == "permission.asked", timeout=15).properties
        assert "line 599 of a long file" in json.dumps(asked["metadata"])
        assert [r["id"] for r in httpx.get(f"{b.url}/permission").json()] == [asked["id"]]
        assert httpx.post(f"{b.url}/permission/{asked['id']}/reply", json={"reply": "once"}).json() is True
        on_b.wait_idle(sid, timeout=15)


def test_a_prompt_admitted_just_before_its_process_dies_is_answered(
    cluster_url: str, project_dir: Path, config_dir: Path
) -> None:
    """kill -9 right after the 204s: the admissions reserved the sessions' leases for the dead
    process (its drains may not have started), so the other process's watchdog takes them over
    once the leases expire and answers every prompt, without the dead process ever coming back."""
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    start_together(a, b)
    try:
        sessions = [httpx.post(f"{a.url}/session").json()["id"] for _ in range(3)]
        with httpx.Client(timeout=10) as client:
            for sid in sessions:
                accepted = client.post(f"{a.url}/session/{sid}/prompt_async", json=text_prompt(f"SLOW:0.2 to {sid}"))
                assert accepted.status_code == 204, accepted.text
        a.kill9()
        killed_at = time.monotonic()
        histories = {sid: _history_when(b.url, sid, _answered_without_error, timeout=30) for sid in sessions}
        answered_in = time.monotonic() - killed_at
    finally:
        a.stop()
        b.stop()
    for sid, history in histories.items():
        assistants = [m for m in history if m["info"]["role"] == "assistant"]
        answered = [m for m in assistants if "error" not in m["info"]]
        assert len(answered) == 1, (sid, [m["info"] for m in assistants])
        assert f"to {sid}" in "".join(p.get("text", "") for p in answered[0]["parts"])
    assert answered_in < 15, answered_in  # a 3 s lease (tests/servers.py) plus the watchdog


def test_a_worktree_fill_cut_short_by_a_killed_process_is_finished_by_a_living_one(
    cluster_url: str, project_dir: Path, config_dir: Path
) -> None:
    """Two processes sharing a data directory: A answers a new worktree and is killed while it
    fills it in the background. B, which keeps running, finds the fill cut short (its lock is
    free) and fills it once: one ``worktree.ready``, no ``worktree.failed``."""
    files = many_files(project_dir, 100, 200)
    git_repository(project_dir)
    a = process_server(cluster_url, project_dir, config_dir)
    b = process_server(cluster_url, project_dir, config_dir)
    start_together(a, b)
    try:
        with EventCollector(f"{b.url}/global/event") as on_b:
            made = httpx.post(f"{a.url}/experimental/worktree", json={"name": "big"}, timeout=30)
            assert made.status_code == 200, made.text
            a.kill9()
            tree = Path(made.json()["directory"])
            assert sum(1 for _ in tree.rglob("f*.txt")) < files, "filled before the kill: nothing to test"
            on_b.wait_for(lambda f: f.type == "worktree.ready", timeout=60)
            wait_until(lambda: sum(1 for _ in tree.rglob("f*.txt")) == files, timeout=10)
            time.sleep(6)  # a sweep later: nothing fills it again
            announced = [f.type for f in on_b.frames if f.type.startswith("worktree.")]
        status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True, check=True)
        assert status.stdout == ""
        assert httpx.get(f"{b.url}/experimental/worktree").json() == [str(tree)]
    finally:
        a.stop()
        b.stop()
    assert announced == ["worktree.ready"]


def test_a_key_saved_through_one_process_is_every_processs(
    cluster_url: str, project_dir: Path, config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each process on a machine of its own (its own data directory): a key saved with
    ``PUT /auth`` through A is listed by B and used by the turns either drains; removed through B,
    it is gone from A too."""
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)  # the processes inherit the environment
    secret = "sk-cluster-wide-7c2f"
    with openai_stub() as stub:
        config = {"model": "deepseek/deepseek-chat", "provider": {"deepseek": {"options": {"baseURL": stub.url}}}}
        (project_dir / "opencode.json").write_text(json.dumps(config))
        servers = [process_server(cluster_url, project_dir, config_dir, tmp_path / f"machine-{i}") for i in range(2)]
        try:
            start_together(*servers)
            a, b = servers
            assert httpx.put(f"{a.url}/auth/deepseek", json={"type": "api", "key": secret}).json() is True

            def connections(server: ProcessServer) -> list[object]:
                return list(httpx.get(f"{server.url}/api/integration/deepseek").json()["data"]["connections"])

            wait_until(lambda: connections(b) == [{"type": "credential", "id": "cred_deepseek", "label": "default"}])
            for server in (a, b, b, a):
                sid = httpx.post(f"{server.url}/session").json()["id"]
                reply = httpx.post(f"{server.url}/session/{sid}/message", json=text_prompt("hi"), timeout=30)
                assert reply.status_code == 200, reply.text
                assert reply.json()["info"].get("error") is None, reply.json()["info"]
            assert {h.get("authorization") for h in stub.chat_headers()} == {f"Bearer {secret}"}

            assert httpx.delete(f"{b.url}/auth/deepseek").json() is True
            wait_until(lambda: connections(a) == [])
        finally:
            for server in servers:
                server.stop()


def test_mcp_servers_changed_at_run_time_are_every_processs(
    two: tuple[ProcessServer, ProcessServer], cluster_url: str, project_dir: Path, config_dir: Path, tmp_path: Path
) -> None:
    """A server added through A is connected on B and B's turns call its tools; disconnected
    through B, it is disconnected on A; a process started afterwards has it as the others do, and
    connecting it there connects it everywhere; a process started after every other stopped has
    it too."""
    a, b = two

    def status(server: ProcessServer) -> object:
        return httpx.get(f"{server.url}/mcp", timeout=30).json()

    added = httpx.post(f"{a.url}/mcp", json={"name": "extra", "config": local_mcp_server(tmp_path)}, timeout=30)
    assert added.status_code == 200 and added.json() == {"extra": {"status": "connected"}}, added.text
    assert status(b) == {"extra": {"status": "connected"}}  # at once: B reads the changes first
    sid = httpx.post(f"{b.url}/session").json()["id"]
    reply = httpx.post(
        f"{b.url}/session/{sid}/message", json=text_prompt('TOOL:extra_add {"a": 1, "b": 2}'), timeout=30
    )
    assert reply.status_code == 200, reply.text
    tools = [p for m in httpx.get(f"{b.url}/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]
    assert [t["state"].get("output") for t in tools] == ["sum=3"]

    assert httpx.post(f"{b.url}/mcp/extra/disconnect", timeout=30).json() is True
    assert status(a) == {"extra": {"status": "disabled"}}

    later = process_server(cluster_url, project_dir, config_dir)
    try:
        start_together(later)
        assert status(later) == {"extra": {"status": "disabled"}}
        assert httpx.post(f"{later.url}/mcp/extra/connect", timeout=30).json() is True
        wait_until(lambda: status(a) == status(b) == {"extra": {"status": "connected"}}, timeout=10)
    finally:
        later.stop()

    # The whole cluster restarted keeps them (unlike one process: see app/runtime/extensions/_shared.py).
    for server in (a, b):
        server.stop()
    alone = process_server(cluster_url, project_dir, config_dir)
    try:
        start_together(alone)
        assert status(alone) == {"extra": {"status": "connected"}}
    finally:
        alone.stop()


def test_each_process_holds_its_presence_from_its_start(
    two: tuple[ProcessServer, ProcessServer], cluster_url: str
) -> None:
    """Presence (the advisory lock a process's listening connection takes as it connects) is what
    lets the others take a killed process's sessions over at once: whatever listens first, the
    connection has it."""
    rows = _sql(
        cluster_url,
        "SELECT count(DISTINCT objid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1"
        " AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        PRESENCE_LOCKS,
    )
    assert rows[0][0] == 2
