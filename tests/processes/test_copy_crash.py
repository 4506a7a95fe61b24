"""A fork or an import killed mid-copy (kill -9 of the server) leaves the whole copy or none
of it, and its source as it was: each is one transaction, however many batches it sends ahead.
After the restarts the server goes on forking."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import ids
from tests.helpers import text_prompt
from tests.servers import ProcessServer, process_server

pytestmark = pytest.mark.slow

PAIRS = 600  # prompt-and-answer pairs: the copy's batches are written ahead, a few times over
KILL_AT = (0.5,)  # fractions of an uninterrupted copy's duration (mid-copy: before its commit)


def _long_export(url: str, session_id: str) -> dict[str, Any]:
    """An export of ``PAIRS`` copies of the session's one prompt and answer, with ids of their own."""
    info = httpx.get(f"{url}/session/{session_id}").json()
    prompt, answer = httpx.get(f"{url}/session/{session_id}/message").json()
    messages = []
    for _ in range(PAIRS):
        asked, replied = ids.message_id(), ids.message_id()
        for original, new_id in ((prompt, asked), (answer, replied)):
            message_info = original["info"] | {"id": new_id}
            if message_info["role"] == "assistant":
                message_info["parentID"] = asked
            parts = [part | {"id": ids.part_id(), "messageID": new_id} for part in original["parts"]]
            messages.append({"info": message_info, "parts": parts})
    return {"info": info | {"id": ids.session_id()}, "messages": messages}


def _message_count(url: str, session_id: str) -> int | None:
    answer = httpx.get(f"{url}/session/{session_id}/message", timeout=60)
    return len(answer.json()) if answer.status_code == 200 else None


def _sessions(url: str) -> dict[str, str]:
    return {s["title"]: s["id"] for s in httpx.get(f"{url}/session", timeout=30).json()}


def _started(database_url: str, project_dir: Path, config_dir: Path) -> ProcessServer:
    server = process_server(database_url, project_dir, config_dir)
    server.start()
    return server


def _killed_during(server: ProcessServer, request: Callable[[str], object], after: float) -> None:
    """Send ``request`` (given the server's URL) on a thread and kill -9 the server ``after``
    seconds later."""

    def send() -> None:
        with suppress(httpx.HTTPError):  # the server is killed under it
            request(server.url)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    time.sleep(after)
    server.kill9()
    thread.join(timeout=30)
    server.stop()


def _fork(url: str, session_id: str) -> httpx.Response:
    return httpx.post(f"{url}/session/{session_id}/fork", json={}, timeout=60)


def _import(url: str, *, export: dict[str, Any]) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(f"{url}/opensession/import", content=json.dumps(export).encode(), headers=headers, timeout=60)


def _assert_whole(url: str, source: dict[str, Any], imported: list[str]) -> None:
    """The source as it was; every fork of it and every import whole, or absent."""
    assert _message_count(url, source["id"]) == 2 * PAIRS
    forks = [sid for title, sid in _sessions(url).items() if title.startswith(f"{source['title']} (fork #")]
    assert forks
    for fork in forks:
        assert _message_count(url, fork) == 2 * PAIRS
    for session_id in imported:
        assert _message_count(url, session_id) in (None, 2 * PAIRS)


def test_a_fork_or_import_killed_mid_copy_leaves_all_of_it_or_none(
    database_url: str, project_dir: Path, config_dir: Path
) -> None:
    server = _started(database_url, project_dir, config_dir)
    try:
        seed = httpx.post(f"{server.url}/session").json()["id"]
        assert httpx.post(f"{server.url}/session/{seed}/message", json=text_prompt("one")).status_code == 200
        imported = _import(server.url, export=_long_export(server.url, seed))
        assert imported.status_code == 200, imported.text
        source = imported.json()
        began = time.perf_counter()
        assert _fork(server.url, source["id"]).status_code == 200
        fork_s = time.perf_counter() - began
        exports = [_long_export(server.url, seed) for _ in KILL_AT]
        began = time.perf_counter()
        assert _import(server.url, export=_long_export(server.url, seed)).status_code == 200
        import_s = time.perf_counter() - began
    finally:
        server.stop()

    for fraction, export in zip(KILL_AT, exports, strict=True):
        server = _started(database_url, project_dir, config_dir)
        _killed_during(server, lambda url: _fork(url, source["id"]), fork_s * fraction)
        server = _started(database_url, project_dir, config_dir)
        _killed_during(server, partial(_import, export=export), import_s * fraction)
    server = _started(database_url, project_dir, config_dir)
    try:
        _assert_whole(server.url, source, [export["info"]["id"] for export in exports])
        after = _fork(server.url, source["id"])  # the server goes on: a fork after the crashes is whole
        assert after.status_code == 200, after.text
        assert _message_count(server.url, after.json()["id"]) == 2 * PAIRS
    finally:
        server.stop()
