"""PostgreSQL itself restarting under load, with two server processes on it: while it is down a
client is told 503 (never a 500, never a hang), and once it is back every prompt that got its
204 is answered, once, whichever process admitted it and whichever drain was mid-turn."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.helpers import text_prompt, wait_until
from tests.postgres import Cluster
from tests.servers import process_server
from tests.sse import EventCollector

pytestmark = pytest.mark.slow

SESSIONS = 4
DOWN_AFTER = 12  # prompts sent (round-robin over the sessions and the two processes) before it stops
AFTER_RESUME = 12  # and after it is back
DOWN_SECONDS = 3.0
MOST_PROMPTS = 300


def _replies(url: str, sid: str) -> tuple[list[str], list[dict]]:
    """The session's prompt texts in order and its assistant messages."""
    history = httpx.get(f"{url}/session/{sid}/message", timeout=10).json()
    texts = ["".join(p.get("text", "") for p in m["parts"]) for m in history if m["info"]["role"] == "user"]
    return texts, [m for m in history if m["info"]["role"] == "assistant"]


def _settled(url: str, sid: str, prompts: int) -> bool:
    texts, replies = _replies(url, sid)
    answered = [m for m in replies if "completed" in m["info"]["time"] and "error" not in m["info"]]
    return len(texts) >= prompts and len(answered) >= len(texts)


def test_a_postgres_restart_under_load_answers_every_admitted_prompt_once(
    own_cluster: Cluster, project_dir: Path, config_dir: Path
) -> None:
    database = own_cluster.create_database()
    servers = [process_server(database, project_dir, config_dir) for _ in range(2)]
    for server in servers:
        server.start()
    outcomes: list[tuple[int, str, str]] = []  # (status, session, text)
    refused_bodies: list[dict] = []
    failures: list[str] = []  # any other answer, with the servers' logs
    try:
        sessions = [httpx.post(f"{servers[0].url}/session").json()["id"] for _ in range(SESSIONS)]
        halted = threading.Event()

        def halt_then_resume() -> None:
            halted.wait(30)
            own_cluster.halt()
            try:
                # One prompt surely sent while it is down: the loop's may all have gone before or
                # after, when the one sent as it stopped had its commit cut off and waited for it.
                text = "SLOW:0.02 sent while down"
                answer = httpx.post(f"{servers[1].url}/session/{sessions[0]}/prompt_async", json=text_prompt(text))
                outcomes.append((answer.status_code, sessions[0], text))
                if answer.status_code == 503:
                    refused_bodies.append(answer.json())
                time.sleep(DOWN_SECONDS)
            finally:
                own_cluster.resume()

        restarter = threading.Thread(target=halt_then_resume, daemon=True)
        restarter.start()
        with httpx.Client(timeout=20) as client:
            resumed_at: int | None = None
            for index in range(MOST_PROMPTS):
                if index == DOWN_AFTER:
                    halted.set()
                if resumed_at is None and index > DOWN_AFTER and not restarter.is_alive():
                    resumed_at = index
                if resumed_at is not None and index >= resumed_at + AFTER_RESUME:
                    break
                sid, url = sessions[index % SESSIONS], servers[index % 2].url
                text = f"SLOW:0.02 prompt {index}"
                answer = client.post(f"{url}/session/{sid}/prompt_async", json=text_prompt(text))
                outcomes.append((answer.status_code, sid, text))
                if answer.status_code == 503:
                    refused_bodies.append(answer.json())
                elif answer.status_code != 204:
                    failures.append(f"{answer.status_code} {answer.text}")
                time.sleep(0.1)
        restarter.join(30)
        admitted = [(sid, text) for status, sid, text in outcomes if status == 204]
        per_session = Counter(sid for sid, _ in admitted)
        deadline = time.monotonic() + 60
        while not all(_settled(servers[1].url, sid, per_session[sid]) for sid in sessions):
            assert time.monotonic() < deadline, [servers[0].log_tail(), servers[1].log_tail()]
            time.sleep(0.2)
        histories = {sid: _replies(servers[1].url, sid) for sid in sessions}
        if failures:
            failures += [server.log_tail(80) for server in servers]
    finally:
        for server in servers:
            server.stop()
    statuses = Counter(status for status, _, _ in outcomes)
    assert set(statuses) <= {204, 503}, "\n".join([str(statuses), *failures])
    assert statuses[503] >= 1, statuses  # the database was down for some of the prompts
    assert [status for status, _, _ in outcomes[-3:]] == [204] * 3, statuses  # and back for the last
    assert all(body.get("name") == "DatabaseUnavailableError" for body in refused_bodies), refused_bodies
    for sid, (texts, replies) in histories.items():
        sent = [text for s, text in admitted if s == sid]
        assert sorted(texts) == sorted(sent), (sid, texts, sent)  # every admitted prompt, once
        answered = [m for m in replies if "error" not in m["info"]]
        assert len(answered) == len(texts), (sid, [m["info"] for m in replies])
        parents = Counter(m["info"]["parentID"] for m in answered)
        assert max(parents.values()) == 1, parents  # nothing answered twice


def test_an_abort_while_a_drain_waits_out_an_outage_closes_its_reply_and_settles_its_prompt(
    own_cluster: Cluster, project_dir: Path, config_dir: Path
) -> None:
    """A turn's last write fails because PostgreSQL stopped; the drain waits for it to come back.
    An abort sent as it returns, while the drain still waits, is carried out when it resumes: the
    reply the failed step left open is closed with an error and its prompt is settled, so the
    next prompt's drain does not answer it a second time beside that open reply."""
    server = process_server(own_cluster.create_database(), project_dir, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        with EventCollector(f"{server.url}/event") as events:
            httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt("SLOW:0.5 cut short"))
            events.wait_for(lambda f: f.type == "message.part.delta", timeout=15)
            own_cluster.halt()
            try:
                wait_until(lambda: f"drain of {sid} paused" in server.log.read_text(errors="replace"), timeout=15)
            finally:
                own_cluster.resume()
            aborted = httpx.post(f"{server.url}/session/{sid}/abort", timeout=30)
        assert aborted.status_code == 200, aborted.text
        assert httpx.post(f"{server.url}/session/{sid}/message", json=text_prompt("next")).status_code == 200
        wait_until(lambda: httpx.get(f"{server.url}/session/status").json() == {}, timeout=15)
        history = httpx.get(f"{server.url}/session/{sid}/message").json()
    finally:
        server.stop()
    first, *later = [m for m in history if m["info"]["role"] == "user"]
    replies = [m["info"] for m in history if m["info"]["role"] == "assistant"]
    to_first = [r for r in replies if r["parentID"] == first["info"]["id"]]
    assert len(to_first) == 1, to_first  # not answered again
    assert "completed" in to_first[0]["time"] and to_first[0]["error"]["name"] == "MessageAbortedError"
    assert [r["parentID"] for r in replies if "error" not in r] == [later[0]["info"]["id"]]
