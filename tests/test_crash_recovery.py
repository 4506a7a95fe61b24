"""``kill -9`` in the middle of a turn loses nothing that was admitted: after a restart the
interrupted reply is closed with an error (keeping its checkpointed text), and every admitted
prompt gets an answer."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import assistant_text, text_prompt
from tests.servers import process_server
from tests.sse import EventCollector

SLOW_PROMPT = "SLOW:0.3 a long answer"


def _wait_for_answers(url: str, sid: str, count: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = httpx.get(f"{url}/session/{sid}/message").json()
        done = [
            m
            for m in history
            if m["info"]["role"] == "assistant" and "error" not in m["info"] and "completed" in m["info"]["time"]
        ]
        if len(done) >= count and httpx.get(f"{url}/session/status").json() == {}:
            return history
        time.sleep(0.1)
    raise TimeoutError(f"expected {count} answers in {sid}")


@pytest.mark.slow
def test_kill_9_during_a_turn_then_restart(tmp_path: Path, project_dir: Path, config_dir: Path) -> None:
    server = process_server(tmp_path / "crash.db", project_dir, config_dir)
    server.start()
    try:
        sid = httpx.post(f"{server.url}/session").json()["id"]
        with EventCollector(f"{server.url}/event") as events:
            assert (
                httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt(SLOW_PROMPT)).status_code == 204
            )
            assert (
                httpx.post(f"{server.url}/session/{sid}/prompt_async", json=text_prompt("queued behind")).status_code
                == 204
            )
            deltas = 0

            def two_deltas(frame) -> bool:  # type: ignore[no-untyped-def]
                nonlocal deltas
                deltas += frame.type == "message.part.delta"
                return deltas >= 2

            events.wait_for(two_deltas, timeout=15)
            time.sleep(0.05)
            server.kill9()
    finally:
        server.stop()

    restarted = process_server(tmp_path / "crash.db", project_dir, config_dir)
    restarted.start()
    try:
        history = _wait_for_answers(restarted.url, sid, 2)
    finally:
        restarted.stop()

    users = [m for m in history if m["info"]["role"] == "user"]
    replies = [m for m in history if m["info"]["role"] == "assistant"]
    assert [assistant_text(u) for u in users] == [SLOW_PROMPT, "queued behind"]
    interrupted, *answers = replies
    assert interrupted["info"]["parentID"] == users[0]["info"]["id"]
    assert interrupted["info"]["error"]["name"] == "MessageAbortedError"
    assert "completed" in interrupted["info"]["time"]
    partial = assistant_text(interrupted)
    assert partial and ("Echo: " + SLOW_PROMPT).startswith(partial)  # checkpointed text survived
    assert all("end" in p["time"] for p in interrupted["parts"] if p["type"] == "text")
    assert [a["info"]["parentID"] for a in answers] == [u["info"]["id"] for u in users]
    assert [assistant_text(a) for a in answers] == ["Echo: " + SLOW_PROMPT, "Echo: queued behind"]
