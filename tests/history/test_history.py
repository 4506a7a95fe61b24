"""History operations over the legacy API: fork, message and part deletion, part update, and
self-hosted sharing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.helpers import assistant_text, create_session, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector, Frame


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


def test_fork_titles_empty_bodies_and_boundaries_not_in_the_session(client: httpx.Client) -> None:
    """As the OpenCode server does: a fork is named from its source's title alone, and the
    boundary is compared as an id, so one the session never had still forks (all messages whose
    ids sort before it)."""
    sid, history = _session_with_turns(client, "one")
    first = client.post(f"/session/{sid}/fork").json()
    second = client.post(f"/session/{sid}/fork", content=b"  \n", headers={"content-type": "application/json"})
    assert second.status_code == 200
    assert [first["title"], second.json()["title"]] == ["Original (fork #1)", "Original (fork #1)"]
    of_fork = client.post(f"/session/{first['id']}/fork").json()
    assert of_fork["title"] == "Original (fork #2)"
    broken = client.post(f"/session/{sid}/fork", content=b"{", headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["name"] == "BadRequest"
    not_an_id = client.post(f"/session/{sid}/fork", json={"messageID": "notamessage"})
    assert not_an_id.status_code == 400 and not_an_id.json()["name"] == "BadRequest"
    earliest = client.post(f"/session/{sid}/fork", json={"messageID": "msg_000000000000000000000000000"})
    assert earliest.status_code == 200
    assert client.get(f"/session/{earliest.json()['id']}/message").json() == []
    latest = client.post(f"/session/{sid}/fork", json={"messageID": "msg_zzzzzzzzzzzzzzzzzzzzzzzzzzz"})
    assert latest.status_code == 200
    assert _texts(client.get(f"/session/{latest.json()['id']}/message").json()) == _texts(history)


def _open_work(messages: list[dict]) -> list[str]:
    """What a listing shows as still running: replies never completed, text or reasoning never
    ended, tool calls pending or running."""
    found = []
    for message in messages:
        if message["info"]["role"] == "assistant" and "completed" not in message["info"]["time"]:
            found.append(f"reply {message['info']['id']}")
        for part in message["parts"]:
            if part["type"] in ("text", "reasoning") and "end" not in part.get("time", {"end": 0}):
                found.append(f"{part['type']} {part['id']}")
            if part["type"] == "tool" and part["state"]["status"] in ("pending", "running"):
                found.append(f"tool {part['id']}")
    return found


MID_TURN = pytest.mark.parametrize(
    ("prompt", "streaming"),
    [
        ("SLOW:0.3 take your time", lambda f: f.type == "message.part.delta"),
        ("TOOL:bash echo waiting", lambda f: f.type == "permission.asked"),  # a tool waits for its permission
    ],
)


def _copy_mid_turn(
    server: ThreadServer,
    client: httpx.Client,
    prompt: str,
    streaming: Callable[[Frame], bool],
    copy: Callable[[str], str],
) -> str:
    """``copy`` (returning the copy's session id) taken while a turn streams, the turn then aborted."""
    sid = create_session(
        client, title="Original", permission=[{"permission": "bash", "pattern": "*", "action": "ask"}]
    )["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt(prompt))
        events.wait_for(lambda f: streaming(f) and f.properties.get("sessionID") == sid)
        assert _open_work(client.get(f"/session/{sid}/message").json())  # the source still streams
        copy_id = copy(sid)
        client.post(f"/session/{sid}/abort")
        events.wait_idle(sid)
    return copy_id


def _assert_closed_copy(client: httpx.Client, copy_id: str) -> None:
    """The copy shows the reply as an abort leaves one, never busy, and takes the next prompt."""
    copied = client.get(f"/session/{copy_id}/message").json()
    assert [m["info"]["role"] for m in copied] == ["user", "assistant"]
    assert _open_work(copied) == []
    assert copied[1]["info"]["error"]["name"] == "MessageAbortedError"
    tools = [p for p in copied[1]["parts"] if p["type"] == "tool"]
    assert all(p["state"]["error"] == "Tool execution aborted" for p in tools)
    assert copy_id not in client.get("/session/status").json()
    reply = client.post(f"/session/{copy_id}/message", json=text_prompt("go on"))
    assert reply.status_code == 200 and assistant_text(reply.json()) == "Echo: go on"


@MID_TURN
def test_a_fork_taken_mid_turn_closes_the_copied_reply(
    server: ThreadServer, client: httpx.Client, prompt: str, streaming: Callable[[Frame], bool]
) -> None:
    """As OpenCode, the fork copies everything the session shows, the reply in flight included;
    nothing will ever finish that copy, so it is closed as an abort closes a reply."""

    def fork(sid: str) -> str:
        response = client.post(f"/session/{sid}/fork")
        assert response.status_code == 200, response.text
        return str(response.json()["id"])

    _assert_closed_copy(client, _copy_mid_turn(server, client, prompt, streaming, fork))


@MID_TURN
def test_an_export_taken_mid_turn_imports_closed(
    server: ThreadServer, client: httpx.Client, prompt: str, streaming: Callable[[Frame], bool]
) -> None:
    """An export is a copy too (``opensession export`` or ``opencode export`` while a turn runs)."""

    def export_and_import(sid: str) -> str:
        info = client.get(f"/session/{sid}").json() | {"id": "ses_0000000000000000000000import"}
        export = {"info": info, "messages": client.get(f"/session/{sid}/message").json()}
        response = client.post("/opensession/import", json=export)
        assert response.status_code == 200, response.text
        return str(response.json()["id"])

    _assert_closed_copy(client, _copy_mid_turn(server, client, prompt, streaming, export_and_import))


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


def test_revoking_a_share_ends_its_open_streams(client: httpx.Client) -> None:
    """Unsharing (or deleting the session) ends every open ``/share/<token>/event`` stream, and
    sharing again under a new token does not bring the old token's back."""
    sid, _history = _session_with_turns(client, "one", title="Shared")
    first = client.post(f"/session/{sid}/share").json()["share"]["url"]
    with EventCollector(f"{first}/event") as revoked:
        revoked.wait_for(lambda f: f.type == "server.connected")
        assert client.delete(f"/session/{sid}/share").status_code == 200
        assert revoked.ended.wait(10), "the revoked share's stream goes on"
        second = client.post(f"/session/{sid}/share").json()["share"]["url"]
        assert second != first
        assert client.post(f"/session/{sid}/message", json=text_prompt("after the revoke")).status_code == 200
    assert not [f.type for f in revoked.frames if f.type.startswith("message.")]
    assert httpx.get(f"{first}/event").status_code == 404
    with EventCollector(f"{second}/event") as deleted:
        deleted.wait_for(lambda f: f.type == "server.connected")
        assert client.delete(f"/session/{sid}").json() is True
        assert deleted.ended.wait(10), "the deleted session's share stream goes on"


def test_a_share_revoked_while_its_stream_opens_ends_that_stream(
    server: ThreadServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revoke that lands after the route checked the token but before the stream subscribed
    (its event is gone by then) still ends the stream, before its first frame."""
    sid, _history = _session_with_turns(client, "one")
    url = client.post(f"/session/{sid}/share").json()["share"]["url"]
    shares = server.runtime.shares
    check = shares.shared

    async def checked_then_revoked(token: str) -> Any:
        found = await check(token)
        await shares.unshare(sid)
        return found

    monkeypatch.setattr(shares, "shared", checked_then_revoked)
    with EventCollector(f"{url}/event") as opening:
        assert opening.ended.wait(10), "a stream opened on a revoked share goes on"
    assert opening.status == 200 and opening.frames == []


def test_concurrent_shares_make_one_token(server: ThreadServer, client: httpx.Client) -> None:
    """Sharing is idempotent under concurrency too: every answer names the one token, so no
    second token the owner never saw stays readable after unsharing what they were shown."""
    sid, _history = _session_with_turns(client, "one")

    async def share_at_once() -> set[str]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            answers = await asyncio.gather(*(http.post(f"/session/{sid}/share") for _ in range(8)))
        return {answer.json()["share"]["url"] for answer in answers}

    urls = asyncio.run(share_at_once())
    assert len(urls) == 1
    assert client.get(f"/session/{sid}").json()["share"]["url"] in urls


def test_a_fork_repeated_with_its_idempotency_key_is_made_once(client: httpx.Client) -> None:
    """A retried fork (same Idempotency-Key) answers the fork the first made; the key asking for
    a fork of another point, or a create, is a conflict."""
    sid, history = _session_with_turns(client, "one", "two")
    key = {"Idempotency-Key": "fork-1"}
    up_to = {"messageID": history[2]["info"]["id"]}
    first, again = (client.post(f"/session/{sid}/fork", json=up_to, headers=key) for _ in "ab")
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert len(client.get(f"/session/{first.json()['id']}/message").json()) == 2
    for other in (client.post(f"/session/{sid}/fork", headers=key), client.post("/session", headers=key)):
        assert other.status_code == 409 and "fork-1" in other.json()["message"], other.text
    assert len(client.get("/session").json()) == 2  # the original and one fork
