"""Operations that must not overlap a turn (revert stage/clear/commit, message delete, part
delete and update) raced against a prompt that starts one: each either answers 409 or happens
wholly outside the turn, never in the middle of it. Each race is repeated with a jitter of a few
milliseconds so that a check-then-act gap fails reliably."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers import create_session, git_repository, text_prompt
from tests.servers import ThreadServer
from tests.sse import EventCollector, Frame

TRIALS = 15


def _kind(frame: Frame) -> str:
    payload = frame.data.get("payload", {})
    if payload.get("type") == "sync":
        return str(payload["syncEvent"]["type"]).rsplit(".", 1)[0]
    return str(payload.get("type"))


def _props(frame: Frame) -> dict:
    payload = frame.data.get("payload", {})
    if payload.get("type") == "sync":
        return payload["syncEvent"]["data"]
    return payload.get("properties") or {}


@dataclass
class Trial:
    sid: str
    user_id: str
    reply_id: str
    part: dict


Op = Callable[[httpx.AsyncClient, Trial], Awaitable[httpx.Response]]


def _stage(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    return client.post(f"/session/{t.sid}/revert", json={"messageID": t.user_id})


def _clear(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    return client.post(f"/api/session/{t.sid}/revert/clear")


def _commit(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    return client.post(f"/api/session/{t.sid}/revert/commit")


def _delete_message(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    return client.delete(f"/session/{t.sid}/message/{t.reply_id}")


def _delete_part(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    return client.delete(f"/session/{t.sid}/message/{t.reply_id}/part/{t.part['id']}")


def _update_part(client: httpx.AsyncClient, t: Trial) -> Awaitable[httpx.Response]:
    part = {**t.part, "text": "edited"}
    return client.patch(f"/session/{t.sid}/message/{t.reply_id}/part/{t.part['id']}", json=part)


# operation -> (request, the event kind that shows its effect, whether a revert is staged first)
OPERATIONS: dict[str, tuple[Op, str, bool]] = {
    "revert stage": (_stage, "session.next.revert.staged", False),
    "revert clear": (_clear, "session.next.revert.cleared", True),
    "revert commit": (_commit, "session.next.revert.committed", True),
    "delete message": (_delete_message, "message.removed", False),
    "delete part": (_delete_part, "message.part.removed", False),
    "update part": (_update_part, "message.part.updated", False),
}


def _prepare(client: httpx.Client, stage_first: bool) -> Trial:
    sid = create_session(client)["id"]
    assert client.post(f"/session/{sid}/message", json=text_prompt("first")).status_code == 200
    user, reply = client.get(f"/session/{sid}/message").json()
    text = next(p for p in reply["parts"] if p["type"] == "text")
    if stage_first:
        assert client.post(f"/session/{sid}/revert", json={"messageID": reply["info"]["id"]}).status_code == 200
    return Trial(sid, user["info"]["id"], reply["info"]["id"], text)


async def _race(url: str, op: Op, trial: Trial) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        lead = random.uniform(-0.003, 0.003)  # which request goes first, and by how much

        async def operation() -> httpx.Response:
            await asyncio.sleep(max(0.0, -lead))
            return await op(client, trial)

        async def prompt() -> None:
            await asyncio.sleep(max(0.0, lead))
            response = await client.post(f"/session/{trial.sid}/prompt_async", json=text_prompt("SLOW:0.02 second"))
            # 409 only while a revert or unrevert moves the session's files.
            assert response.status_code in (204, 409), response.text
            # A prompt while the turn runs: admission must not commit a staged revert under it.
            await client.post(f"/session/{trial.sid}/prompt_async", json=text_prompt("third"))

        response, _ = await asyncio.gather(operation(), prompt())
        return response


def _during_turn(frames: list[Frame], sid: str, effect: str) -> bool:
    """Whether the operation's effect was published while the session was busy."""
    busy = False
    for frame in frames:
        if _props(frame).get("sessionID") != sid:
            continue
        kind = _kind(frame)
        if kind == "session.status":
            busy = _props(frame)["status"]["type"] != "idle"
        elif kind == effect and busy:
            ours = effect != "message.part.updated" or _props(frame)["part"].get("text") == "edited"
            if ours:
                return True
    return False


def _timeline(frames: list[Frame], sid: str) -> list[str]:
    """The session's frames as kinds (a status with its type), for a failure's message."""
    kinds = []
    for frame in frames:
        if _props(frame).get("sessionID") == sid:
            kind = _kind(frame)
            kinds.append(f"{kind}:{_props(frame)['status']['type']}" if kind == "session.status" else kind)
    return kinds


def _consistent(history: list[dict]) -> None:
    users = {m["info"]["id"] for m in history if m["info"]["role"] == "user"}
    for message in history:
        if message["info"]["role"] == "assistant":
            assert message["info"]["parentID"] in users, "a reply outlived its prompt"
            assert message["parts"][0]["type"] == "step-start", "a reply lost its beginning"


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_history_operation_never_lands_inside_a_turn(
    server: ThreadServer, client: httpx.Client, operation: str
) -> None:
    op, effect, stage_first = OPERATIONS[operation]
    outcomes: list[int] = []
    with EventCollector(f"{server.url}/global/event") as events:
        for _ in range(TRIALS):
            trial = _prepare(client, stage_first)
            response = asyncio.run(_race(server.url, op, trial))
            assert response.status_code in (200, 204, 409), response.text
            outcomes.append(response.status_code)
            if response.status_code == 409:
                assert response.json()["_tag"] == "SessionBusyError"
            assert client.post(f"/session/{trial.sid}/message", json=text_prompt("settle")).status_code == 200
            events.wait_idle(trial.sid)
            frames = events.snapshot()
            assert not _during_turn(frames, trial.sid, effect), (outcomes, _timeline(frames, trial.sid))
            history = client.get(f"/session/{trial.sid}/message").json()
            _consistent(history)
            assert "revert" not in client.get(f"/session/{trial.sid}").json()


FILES = 200  # enough for an unrevert to take a while


def test_unrevert_and_a_prompt_never_interleave(server: ThreadServer, client: httpx.Client, project_dir: Path) -> None:
    """The prompt commits the staged revert (its messages go), the unrevert puts its files back:
    either happens first, or one of them is refused; never the messages gone and the files back."""
    git_repository(project_dir)
    outcomes: list[tuple[int, int]] = []
    for trial in range(TRIALS):
        folder = project_dir / f"t{trial}"
        sid = create_session(client)["id"]
        make = f"TOOL:bash mkdir {folder.name} && for i in $(seq {FILES}); do echo $i > {folder.name}/f$i.txt; done"
        assert client.post(f"/session/{sid}/message", json=text_prompt(make)).status_code == 200
        made = client.get(f"/session/{sid}/message").json()[0]["info"]["id"]
        assert client.post(f"/session/{sid}/revert", json={"messageID": made}).status_code == 200
        assert not any(folder.iterdir())

        async def race(sid: str = sid) -> tuple[int, int]:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                delay = random.uniform(0.0, 0.03)  # the prompt lands somewhere in the unrevert

                async def prompt() -> httpx.Response:
                    await asyncio.sleep(delay)
                    return await http.post(f"/session/{sid}/prompt_async", json=text_prompt("next"))

                unrevert, admitted = await asyncio.gather(http.post(f"/session/{sid}/unrevert"), prompt())
                return unrevert.status_code, admitted.status_code

        outcomes.append(asyncio.run(race()))
        assert set(outcomes[-1]) <= {200, 204, 409}, outcomes
        client.post(f"/session/{sid}/message", json=text_prompt("settle"))
        kept = made in [m["info"]["id"] for m in client.get(f"/session/{sid}/message").json()]
        restored = len(list(folder.iterdir()))
        assert restored == (FILES if kept else 0), (trial, outcomes, kept, restored)
