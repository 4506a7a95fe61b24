"""Session lifecycle over the legacy API."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer

DEFAULT_TITLE = re.compile(r"^New session - \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_create_with_empty_body_no_body_and_title(client: httpx.Client, project_dir: Path) -> None:
    empty = client.post("/session", json={}).json()
    bare = client.post("/session").json()
    titled = create_session(client, title="My titled session")
    for info in (empty, bare):
        assert info["id"].startswith("ses_") and len(info["id"]) == 30
        assert DEFAULT_TITLE.match(info["title"]), info["title"]
        assert info["directory"] == str(project_dir)
        assert info["tokens"] == {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
        assert info["time"]["created"] == info["time"]["updated"]
    assert titled["title"] == "My titled session"
    # Session ids sort newest first, as OpenCode's do.
    assert sorted([empty["id"], bare["id"], titled["id"]]) == [titled["id"], bare["id"], empty["id"]]
    assert client.get(f"/session/{titled['id']}").json() == titled


def test_list_filters_roots_search_start_limit(client: httpx.Client) -> None:
    parent = create_session(client, title="alpha parent")
    child = create_session(client, parentID=parent["id"], title="alpha child")
    create_session(client, title="beta")
    assert child["parentID"] == parent["id"]
    titles = [s["title"] for s in client.get("/session").json()]
    assert titles == ["beta", "alpha child", "alpha parent"]  # most recently updated first
    roots = client.get("/session", params={"roots": "true"}).json()
    assert {s["title"] for s in roots} == {"alpha parent", "beta"}
    assert {s["title"] for s in client.get("/session", params={"search": "alpha"}).json()} == {
        "alpha parent",
        "alpha child",
    }
    assert len(client.get("/session", params={"limit": 1}).json()) == 1
    future = int(time.time() * 1000) + 60_000
    assert client.get("/session", params={"start": future}).json() == []
    children = client.get(f"/session/{parent['id']}/children").json()
    assert [s["id"] for s in children] == [child["id"]]


def test_directory_scoping_by_query_and_header(client: httpx.Client, tmp_path: Path) -> None:
    other = tmp_path / "other project"
    other.mkdir()
    mine = create_session(client, title="mine")
    theirs = client.post("/session", params={"directory": str(other)}, json={"title": "theirs"}).json()
    assert theirs["directory"] == str(other)
    assert [s["id"] for s in client.get("/session").json()] == [mine["id"]]
    by_query = client.get("/session", params={"directory": str(other)}).json()
    by_header = client.get("/session", headers={"x-opencode-directory": httpx.URL(str(other)).raw_path.decode()})
    assert [s["id"] for s in by_query] == [theirs["id"]]
    assert [s["id"] for s in by_header.json()] == [theirs["id"]]


def test_update_and_archive_emit_new_info(client: httpx.Client) -> None:
    session = create_session(client)
    renamed = client.patch(f"/session/{session['id']}", json={"title": "renamed", "time": {"archived": 123}})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "renamed"
    assert renamed.json()["time"]["archived"] == 123
    assert client.get(f"/session/{session['id']}").json()["title"] == "renamed"


def test_delete_removes_session_children_and_messages(client: httpx.Client) -> None:
    parent = create_session(client)
    child = create_session(client, parentID=parent["id"])
    assert client.post(f"/session/{parent['id']}/message", json=text_prompt("hi")).status_code == 200
    assert client.delete(f"/session/{parent['id']}").json() is True
    for sid in (parent["id"], child["id"]):
        missing = client.get(f"/session/{sid}")
        assert missing.status_code == 404
        assert missing.json() == {"name": "NotFoundError", "data": {"message": f"Session not found: {sid}"}}
    assert client.get(f"/session/{parent['id']}/message").status_code == 404
    assert client.delete(f"/session/{parent['id']}").status_code == 404


def test_todo_diff_and_status_when_idle(client: httpx.Client) -> None:
    session = create_session(client)
    assert client.get(f"/session/{session['id']}/todo").json() == []
    assert client.get(f"/session/{session['id']}/diff").json() == []
    assert client.get("/session/status").json() == {}


def test_a_session_read_that_races_a_write_does_not_overwrite_it_in_the_cache(
    server: ThreadServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session read from a reader connection while a write changes it returns the row as it
    was; it must not then replace the written info in the cache (later reads, and the next
    read-modify-write, would see the old row)."""
    sid = create_session(client)["id"]
    sessions = server.runtime.sessions
    original = sessions.queries.session
    read_done, let_go = threading.Event(), asyncio.Event()

    async def slow_read(session_id: str) -> dict[str, Any] | None:
        info = await original(session_id)
        read_done.set()
        await let_go.wait()
        return info

    monkeypatch.setattr(sessions.queries, "session", slow_read)

    async def race() -> tuple[str, str]:
        sessions._cache.clear()  # the next get reads the row
        reading = asyncio.create_task(sessions.get(sid))
        await asyncio.to_thread(read_done.wait, 5)
        await sessions.update(sid, lambda info: info.update(title="renamed"))
        let_go.set()
        stale = await reading
        return stale["title"], (await sessions.get(sid))["title"]

    stale, now = asyncio.run_coroutine_threadsafe(race(), server.loop).result(10)
    assert stale != "renamed"  # read before the write
    assert now == "renamed"
    assert client.get(f"/session/{sid}").json()["title"] == "renamed"
