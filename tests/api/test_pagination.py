"""Legacy message paging: ``limit`` returns the newest N (oldest first within the page) with an
``x-next-cursor`` / ``Link`` pair that walks back through older pages."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import create_session, text_prompt


def test_pages_walk_back_through_history(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    for i in range(5):
        client.post(f"/session/{sid}/message", json=text_prompt(f"turn {i}"))
    everything = client.get(f"/session/{sid}/message")
    assert "x-next-cursor" not in everything.headers
    all_ids = [m["info"]["id"] for m in everything.json()]
    assert len(all_ids) == 10 and all_ids == sorted(all_ids)

    collected: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 4}
        if cursor:
            params["before"] = cursor
        page = client.get(f"/session/{sid}/message", params=params)
        assert page.status_code == 200
        ids = [m["info"]["id"] for m in page.json()]
        assert ids == sorted(ids)
        collected = ids + collected
        pages += 1
        cursor = page.headers.get("x-next-cursor")
        if cursor is None:
            assert "link" not in page.headers
            break
        assert page.headers["link"] == f'</session/{sid}/message?limit=4&before={cursor}>; rel="next"'
        assert "X-Next-Cursor" in page.headers["access-control-expose-headers"]
    assert collected == all_ids
    assert pages == 3


def test_bad_cursors_are_rejected(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    message_id = client.post(f"/session/{sid}/message", json=text_prompt("x")).json()["info"]["id"]
    cursors: tuple[dict[str, Any], ...] = (
        {"limit": 2, "before": message_id},
        {"limit": 2, "before": "!!!"},
        {"before": "abc"},
    )
    for params in cursors:
        response = client.get(f"/session/{sid}/message", params=params)
        assert response.status_code == 400, params
        assert response.json()["name"] == "BadRequest"
    assert client.get(f"/session/{sid}/message", params={"limit": 0}).json() == []
