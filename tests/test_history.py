"""History operations over the legacy API: fork, message and part deletion, part update, and
self-hosted sharing."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector


def _session_with_turns(client: httpx.Client, *texts: str, title: str = "Original") -> tuple[str, list[dict]]:
    sid = create_session(client, title=title)["id"]
    for text in texts:
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    return sid, client.get(f"/session/{sid}/message").json()


def _texts(messages: list[dict]) -> list[str]:
    return [p["text"] for m in messages for p in m["parts"] if p["type"] == "text"]


@pytest.mark.parametrize(("boundary", "kept"), [(0, 0), (2, 2), (4, 4), (None, 6)])
def test_fork_copies_messages_strictly_before_the_boundary(
    client: httpx.Client, boundary: int | None, kept: int
) -> None:
    sid, history = _session_with_turns(client, "one", "two", "three")
    body = {} if boundary is None else {"messageID": history[boundary]["info"]["id"]}
    fork = client.post(f"/session/{sid}/fork", json=body)
    assert fork.status_code == 200, fork.text
    info = fork.json()
    assert info["id"] != sid and "parentID" not in info
    assert info["title"] == "Original (fork #1)"
    copied = client.get(f"/session/{info['id']}/message").json()
    assert _texts(copied) == _texts(history[:kept])
    original_ids = {m["info"]["id"] for m in history}
    assert not original_ids & {m["info"]["id"] for m in copied}  # new ids
    for message in copied:
        assert message["info"]["sessionID"] == info["id"]
        assert all(p["sessionID"] == info["id"] and p["messageID"] == message["info"]["id"] for p in message["parts"])
        if message["info"]["role"] == "assistant":
            assert message["info"]["parentID"] in {m["info"]["id"] for m in copied}
    assert client.get(f"/session/{sid}/children").json() == []  # a fork is not a child
    assert len(client.get(f"/session/{sid}/message").json()) == 6  # the original is untouched


def test_fork_numbering_empty_bodies_and_missing_boundary(client: httpx.Client) -> None:
    sid, _history = _session_with_turns(client, "one")
    first = client.post(f"/session/{sid}/fork").json()
    second = client.post(f"/session/{sid}/fork", content=b"  \n", headers={"content-type": "application/json"})
    assert second.status_code == 200
    assert [first["title"], second.json()["title"]] == ["Original (fork #1)", "Original (fork #2)"]
    broken = client.post(f"/session/{sid}/fork", content=b"{", headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["name"] == "BadRequest"
    sessions_before = len(client.get("/session").json())
    missing = client.post(f"/session/{sid}/fork", json={"messageID": "msg_000000000000000000000000000"})
    assert missing.status_code == 404 and missing.json()["name"] == "NotFoundError"
    assert len(client.get("/session").json()) == sessions_before  # no half-made fork


def test_delete_message_and_part_and_patch_part(server: ThreadServer, client: httpx.Client) -> None:
    sid, history = _session_with_turns(client, "one", "two")
    reply = history[1]
    text_part = next(p for p in reply["parts"] if p["type"] == "text")
    with EventCollector(f"{server.url}/event") as events:
        patched = client.patch(
            f"/session/{sid}/message/{reply['info']['id']}/part/{text_part['id']}", json={**text_part, "text": "edited"}
        )
        assert patched.status_code == 200 and patched.json()["text"] == "edited"
        assert client.delete(f"/session/{sid}/message/{reply['info']['id']}/part/{text_part['id']}").json() is True
        assert client.delete(f"/session/{sid}/message/{history[2]['info']['id']}").json() is True
        events.wait_for(lambda f: f.type == "message.removed")
        kinds = [f.type for f in events.of_session(sid)]
    assert kinds == ["message.part.updated", "message.part.removed", "message.removed"]
    left = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["id"] for m in left] == [history[0]["info"]["id"], reply["info"]["id"], history[3]["info"]["id"]]
    assert all(p["id"] != text_part["id"] for p in left[1]["parts"])
    missing = client.delete(f"/session/{sid}/message/{history[2]['info']['id']}")
    assert missing.status_code == 404
    mismatched = client.patch(
        f"/session/{sid}/message/{reply['info']['id']}/part/{text_part['id']}",
        json={**text_part, "id": "prt_000000000000000000000000000"},
    )
    assert mismatched.status_code == 400


def test_message_delete_is_refused_while_busy(server: ThreadServer, client: httpx.Client) -> None:
    sid, history = _session_with_turns(client, "one")
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.2 busy"))
        events.wait_for(lambda f: f.type == "message.part.delta")
        busy = client.delete(f"/session/{sid}/message/{history[0]['info']['id']}")
        assert busy.status_code == 409 and busy.json()["_tag"] == "SessionBusyError"
        events.wait_idle(sid)


def test_share_serves_a_read_only_page_until_unshared(client: httpx.Client, server: ThreadServer) -> None:
    sid, _history = _session_with_turns(client, "<b>hello</b> & welcome", title="Shared <title>")
    shared = client.post(f"/session/{sid}/share").json()
    url = shared["share"]["url"]
    assert url.startswith(f"{server.url}/share/") and len(url.rsplit("/", 1)[1]) >= 32
    assert client.post(f"/session/{sid}/share").json()["share"]["url"] == url  # sharing again keeps the url
    page = httpx.get(url)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "&lt;b&gt;hello&lt;/b&gt; &amp; welcome" in page.text and "<b>hello</b>" not in page.text
    assert "Shared &lt;title&gt;" in page.text
    data = httpx.get(f"{url}/data").json()
    assert data["session"]["id"] == sid and len(data["messages"]) == 2
    unshared = client.delete(f"/session/{sid}/share")
    assert unshared.status_code == 200 and "share" not in unshared.json()
    assert httpx.get(url).status_code == 404
    assert httpx.get(f"{url}/data").status_code == 404
    assert client.get(f"{server.url}/share/not-a-token").status_code == 404
