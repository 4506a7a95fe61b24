"""What OpenCode's clients send is accepted: the web app lists its home screen's sessions with
``GET /api/session?limit=5000&order=desc`` (it read a 400 as "no sessions"), and OpenCode's own
server sets no maximum on the session lists, legacy messages, file search or diff context (on V2
message and history pages it does: 200 and 100, and so does this server). Long lists
are read and written a page at a time (``LIST_PAGE`` is made small here to see that), so a large
``limit`` never holds every session in memory; lists with a next page serve at most a bounded
page and say where the rest is."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.runtime.sessions import _service
from tests.helpers import create_session, git_repository, text_prompt


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(_service, "LIST_PAGE", 2)
    return 2


def _sessions(client: httpx.Client, count: int) -> list[str]:
    """``count`` sessions, newest first (as every list orders them)."""
    created = [create_session(client, title=f"session {n}")["id"] for n in range(count)]
    return created[::-1]


def test_v2_list_takes_the_web_apps_limit_and_pages_internally(client: httpx.Client, small_pages: int) -> None:
    newest_first = _sessions(client, 7)
    response = client.get("/api/session", params={"limit": 5000, "order": "desc"})
    assert response.status_code == 200, response.text
    assert response.headers.get("transfer-encoding") == "chunked"  # written page by page
    body = response.json()
    assert [s["id"] for s in body["data"]] == newest_first
    assert body["cursor"] == {}  # the web app stops at a page shorter than its limit, or without next

    first = client.get("/api/session", params={"limit": 5, "order": "desc"}).json()
    assert [s["id"] for s in first["data"]] == newest_first[:5]
    rest = client.get("/api/session", params={"cursor": first["cursor"]["next"], "limit": 5000}).json()
    assert [s["id"] for s in rest["data"]] == newest_first[5:]
    assert rest["cursor"] == {}

    exact = client.get("/api/session", params={"limit": 7, "order": "asc"}).json()
    assert [s["id"] for s in exact["data"]] == newest_first[::-1]
    assert exact["cursor"] == {}
    assert client.get("/api/session", params={"limit": 2**63 - 1}).status_code == 200
    for bad in (0, -1, "many"):
        response = client.get("/api/session", params={"limit": bad})
        assert response.status_code == 400 and response.json()["_tag"] == "InvalidRequestError"


def test_legacy_list_takes_any_limit_and_pages_internally(client: httpx.Client, small_pages: int) -> None:
    newest_first = _sessions(client, 5)
    response = client.get("/session", params={"limit": 20_000})
    assert response.status_code == 200, response.text
    assert [s["id"] for s in response.json()] == newest_first
    assert [s["id"] for s in client.get("/session", params={"limit": 3}).json()] == newest_first[:3]
    assert [s["id"] for s in client.get("/session").json()] == newest_first  # default 100
    assert client.get("/session", params={"limit": 0}).json() == []
    searched = client.get("/session", params={"limit": 5000, "search": "session 1"}).json()
    assert [s["id"] for s in searched] == [newest_first[-2]]
    assert client.get("/session", params={"search": "x" * 3000}).json() == []  # no length limit either

    everywhere = client.get("/experimental/session", params={"limit": 50_000})
    assert everywhere.status_code == 200
    assert [s["id"] for s in everywhere.json()] == newest_first
    assert "x-next-cursor" not in everywhere.headers


def test_message_and_history_pages_take_any_limit(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    for text in ("one", "two"):
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    legacy = client.get(f"/session/{sid}/message", params={"limit": 50_000})
    assert legacy.status_code == 200 and len(legacy.json()) == 4
    assert "x-next-cursor" not in legacy.headers
    # V2 pages take what OpenCode's server takes (it refuses more, though its document says no maximum)
    v2 = client.get(f"/api/session/{sid}/message", params={"limit": 200})
    assert v2.status_code == 200 and len(v2.json()["data"]) == 4
    assert client.get(f"/api/session/{sid}/message", params={"limit": 201}).status_code == 400
    history = client.get(f"/api/session/{sid}/history", params={"limit": 100})
    assert history.status_code == 200 and history.json()["data"] and history.json()["hasMore"] is False
    assert client.get(f"/api/session/{sid}/history", params={"limit": 101}).status_code == 400


def test_long_titles_file_search_and_diff_context(client: httpx.Client, project_dir: Path) -> None:
    long_title = "t" * 5000
    sid = create_session(client, title=long_title)["id"]
    assert client.patch(f"/session/{sid}", json={"title": long_title + "!"}).json()["title"] == long_title + "!"
    (project_dir / "notes.txt").write_text("one\n")
    git_repository(project_dir)
    (project_dir / "notes.txt").write_text("one\ntwo\n")
    found = client.get("/api/fs/find", params={"query": "notes", "limit": 5000})
    assert found.status_code == 200 and [f["path"] for f in found.json()["data"]] == ["notes.txt"]
    diff = client.get("/vcs/diff", params={"mode": "git", "context": 99_999_999_999})
    assert diff.status_code == 200 and diff.json()[0]["file"] == "notes.txt"
