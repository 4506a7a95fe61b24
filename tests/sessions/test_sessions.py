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

import app.runtime.sessions._service as sessions_service
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


def test_sessions_of_every_project_most_recent_first_paged_by_cursor(
    client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    """``GET /experimental/session`` (OpenCode's list across projects): every directory's sessions,
    most recently updated first, each with its ``project``; archived ones only when asked, roots
    only when asked; ``x-next-cursor`` pages through the rest without losing or repeating any."""
    other = tmp_path / "other"
    other.mkdir()
    here = [create_session(client, title=f"here {i}")["id"] for i in range(3)]
    there = [
        client.post("/session", params={"directory": str(other)}, json={"title": f"there {i}"}).json()["id"]
        for i in range(3)
    ]
    child = create_session(client, parentID=here[0], title="child")["id"]
    archived = create_session(client, title="archived")["id"]
    assert client.patch(f"/session/{archived}", json={"time": {"archived": 1}}).status_code == 200

    listed = client.get("/experimental/session").json()
    assert {s["id"] for s in listed} == {*here, *there, child}
    updated = [s["time"]["updated"] for s in listed]
    assert updated == sorted(updated, reverse=True)
    by_id = {s["id"]: s for s in listed}
    assert by_id[there[0]]["project"] == {"id": by_id[there[0]]["projectID"], "worktree": str(other)}

    assert {s["id"] for s in client.get("/experimental/session", params={"roots": "true"}).json()} == {*here, *there}
    with_archived = client.get("/experimental/session", params={"archived": "true"}).json()
    assert archived in {s["id"] for s in with_archived} and with_archived[0]["id"] == archived  # updated last
    only_other = client.get("/experimental/session", params={"directory": str(other)}).json()
    assert {s["id"] for s in only_other} == set(there)
    assert [s["id"] for s in client.get("/experimental/session", params={"search": "THERE 1"}).json()] == [there[1]]

    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        response = client.get("/experimental/session", params=params)
        page = response.json()
        assert page  # two, or more when several were updated in the page's last millisecond
        seen += [s["id"] for s in page]
        cursor = response.headers.get("x-next-cursor")
        if cursor is None:
            break
        assert int(cursor) == page[-1]["time"]["updated"]
        params["cursor"] = cursor
    assert seen == [s["id"] for s in listed]
    assert client.get("/experimental/session", params={"limit": 0}).status_code == 400


def test_a_page_of_sessions_never_splits_a_millisecond(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions updated in the same millisecond as a page's last one all go in that page: the next
    page starts below that time (``cursor`` is a time), so splitting them would lose some."""
    monkeypatch.setattr(sessions_service, "now_ms", lambda: 1_700_000_000_000)
    tied = {create_session(client, title=f"tied {i}")["id"] for i in range(5)}
    monkeypatch.undo()
    newer = create_session(client, title="newer")["id"]
    first = client.get("/experimental/session", params={"limit": 2})
    page = first.json()
    assert page[0]["id"] == newer
    assert {s["id"] for s in page[1:]} == tied  # the limit, and every tie of its last
    assert first.headers.get("x-next-cursor") is None  # nothing older is left
    second = client.get("/experimental/session", params={"limit": 1, "cursor": page[0]["time"]["updated"]})
    assert {s["id"] for s in second.json()} == tied and "x-next-cursor" not in second.headers


def test_a_create_repeated_with_its_idempotency_key_makes_one_session(client: httpx.Client) -> None:
    """A retry of a create (a client's, or nginx's after the replica that had it died) carries the
    same Idempotency-Key and gets the session the first made, on either API; the key asking for
    something else is a conflict, and a deleted session's key makes a new one."""
    key = {"Idempotency-Key": "create-1"}
    first, again = (client.post("/session", json={"title": "once"}, headers=key) for _ in "ab")
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    conflict = client.post("/session", json={"title": "another"}, headers=key)
    assert conflict.status_code == 409 and conflict.json()["_tag"] == "ConflictError", conflict.text
    assert "create-1" in conflict.json()["message"]
    v2_key = {"Idempotency-Key": "create-2"}
    made = [client.post("/api/session", json={}, headers=v2_key).json()["data"]["id"] for _ in "ab"]
    assert made[0] == made[1] != first.json()["id"]
    listed = [s["id"] for s in client.get("/session").json()]
    assert sorted(listed) == sorted([first.json()["id"], made[0]])
    assert client.delete(f"/session/{first.json()['id']}").status_code == 200
    remade = client.post("/session", json={"title": "once"}, headers=key)
    assert remade.status_code == 200 and remade.json()["id"] not in listed
    too_long = client.post("/session", headers={"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 400 and "Idempotency-Key" in too_long.text, too_long.text


def test_creates_racing_with_one_idempotency_key_make_one_session(server: ThreadServer) -> None:
    """Copies of one request in flight at once (a client retrying over a second connection): the
    key is held from its lookup to the commit, so one session is made and every copy answers it."""

    async def race(key: str) -> set[str]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            answers = await asyncio.gather(
                *(http.post("/session", json={}, headers={"Idempotency-Key": key}) for _ in range(8))
            )
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        return {a.json()["id"] for a in answers}

    made = [asyncio.run(race(f"raced-{n}")) for n in range(5)]
    assert [len(ids) for ids in made] == [1] * 5
    listed = {s["id"] for s in httpx.get(f"{server.url}/session").json()}
    assert listed == set().union(*made)
