"""Revert marks a point in history; unrevert forgets it; the next prompt removes what was
reverted (each with ``message.removed``). V2 stage/clear/commit reach the same operation."""

from __future__ import annotations

import httpx

from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector


def _turns(client: httpx.Client, sid: str, *texts: str) -> list[dict]:
    for text in texts:
        assert client.post(f"/session/{sid}/message", json=text_prompt(text)).status_code == 200
    return client.get(f"/session/{sid}/message").json()


def test_revert_unrevert_revert_then_prompt_removes_messages(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    history = _turns(client, sid, "one", "two", "three")
    second_user = history[2]["info"]["id"]
    reverted = client.post(f"/session/{sid}/revert", json={"messageID": second_user})
    assert reverted.status_code == 200 and reverted.json()["revert"] == {"messageID": second_user}
    assert len(client.get(f"/session/{sid}/message").json()) == 6  # nothing deleted yet
    unreverted = client.post(f"/session/{sid}/unrevert")
    assert unreverted.status_code == 200 and "revert" not in unreverted.json()
    client.post(f"/session/{sid}/revert", json={"messageID": second_user})
    doomed = [m["info"]["id"] for m in history[2:]]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/message", json=text_prompt("four"))
        events.wait_idle(sid)
        removed = [f.properties["messageID"] for f in events.of_session(sid) if f.type == "message.removed"]
    assert removed == doomed
    after = client.get(f"/session/{sid}/message").json()
    texts = [p["text"] for m in after for p in m["parts"] if p["type"] == "text"]
    assert texts == ["one", "Echo: one", "four", "Echo: four"]
    assert "revert" not in client.get(f"/session/{sid}").json()


def test_revert_of_an_unknown_message_leaves_the_session_unchanged(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    response = client.post(f"/session/{sid}/revert", json={"messageID": "msg_000000000000000000000000000"})
    assert response.status_code == 200 and "revert" not in response.json()


def test_busy_session_refuses_revert_and_unrevert(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    first = _turns(client, sid, "one")[0]["info"]["id"]
    with EventCollector(f"{server.url}/event") as events:
        client.post(f"/session/{sid}/prompt_async", json=text_prompt("SLOW:0.2 busy now"))
        events.wait_for(lambda f: f.type == "message.part.delta" and f.properties["sessionID"] == sid)
        for path, body in ((f"/session/{sid}/revert", {"messageID": first}), (f"/session/{sid}/unrevert", None)):
            busy = client.post(path, json=body)
            assert busy.status_code == 409
            assert busy.json() == {"_tag": "SessionBusyError", "sessionID": sid, "message": f"Session is busy: {sid}"}
        events.wait_idle(sid)


def test_v2_stage_clear_commit(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    history = _turns(client, sid, "keep", "drop")
    boundary = history[2]["info"]["id"]
    staged = client.post(f"/api/session/{sid}/revert/stage", json={"messageID": boundary})
    assert staged.status_code == 200 and staged.json() == {"data": {"messageID": boundary}}
    assert client.get(f"/api/session/{sid}").json()["data"]["revert"] == {"messageID": boundary}
    assert client.post(f"/api/session/{sid}/revert/clear").status_code == 204
    assert "revert" not in client.get(f"/api/session/{sid}").json()["data"]
    client.post(f"/api/session/{sid}/revert/stage", json={"messageID": boundary})
    assert client.post(f"/api/session/{sid}/revert/commit").status_code == 204
    left = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["id"] for m in left] == [m["info"]["id"] for m in history[:2]]
    unknown = client.post(f"/api/session/{sid}/revert/stage", json={"messageID": "msg_000000000000000000000000000"})
    assert unknown.status_code == 404 and unknown.json()["_tag"] == "MessageNotFoundError"
    kinds = [e["type"] for e in client.get(f"/api/session/{sid}/history", params={"limit": 100}).json()["data"]]
    assert kinds.count("session.next.revert.staged") == 2
    assert "session.next.revert.cleared" in kinds and kinds[-1] == "session.next.revert.committed"


def test_a_shell_command_commits_a_staged_revert_first(client: httpx.Client) -> None:
    """As a prompt does: the command continues from the revert point, and no revert stays staged
    beside what it ran (a later revert would start from the stale one)."""
    sid = create_session(client)["id"]
    history = _turns(client, sid, "one", "two")
    assert client.post(f"/session/{sid}/revert", json={"messageID": history[2]["info"]["id"]}).status_code == 200
    shell = client.post(f"/session/{sid}/shell", json={"agent": "build", "command": "echo from-shell"})
    assert shell.status_code == 200, shell.text
    after = client.get(f"/session/{sid}/message").json()
    assert [m["info"]["id"] for m in after[:2]] == [m["info"]["id"] for m in history[:2]]
    assert len(after) == 4 and after[3]["info"]["id"] == shell.json()["info"]["id"]
    assert "revert" not in client.get(f"/session/{sid}").json()
