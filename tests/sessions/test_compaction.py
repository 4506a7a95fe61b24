"""Compaction: the summary becomes the model's context while every message stays listed; summary
versions are checked optimistically; a small-context model compacts by itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.events.bus import EventBus
from app.events.log import EventLog
from app.providers.base import ChatRequest
from app.providers.echo import EchoProvider
from app.runtime.errors import Conflict
from app.runtime.history import Summaries
from app.runtime.inputs import PromptRequest
from app.runtime.service import Runtime
from app.store.database import open_database
from app.store.queries import Queries
from app.store.statement import Statement
from tests.helpers import create_session, text_prompt
from tests.servers import OpenAIStub, StubReply, openai_stub
from tests.sse import EventCollector

MODEL = {"providerID": "stub", "modelID": "stub-model"}
SUMMARY = "SUMMARY: the user asked two questions"


def _is_summary_request(body: dict) -> bool:
    return "summarizing a conversation" in body["messages"][0]["content"]


def _reply(body: dict) -> StubReply:
    if _is_summary_request(body):
        return StubReply(content=[SUMMARY])
    return StubReply(content=["answer to ", body["messages"][-1]["content"]])


def _configure(directory: Path, url: str, **model: object) -> None:
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": url},
        "models": {"stub-model": {"name": "Stub", **model}},
    }
    (directory / "opencode.json").write_text(json.dumps({"model": "stub/stub-model", "provider": {"stub": provider}}))


@pytest.fixture
def stub(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub(_reply) as handle:
        _configure(project_dir, handle.url)
        yield handle


def _turn_requests(stub: OpenAIStub) -> list[dict]:
    return [
        r for r in stub.requests if not _is_summary_request(r) and "title generator" not in r["messages"][0]["content"]
    ]


def test_summarize_keeps_the_listing_and_shrinks_the_context(stub: OpenAIStub, server, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    for text in ("first question", "second question"):
        client.post(f"/session/{sid}/message", json=text_prompt(text, model=MODEL))
    before = client.get(f"/session/{sid}/message").json()
    with EventCollector(f"{server.url}/event") as events:
        response = client.post(f"/session/{sid}/summarize", json=MODEL)
        assert response.status_code == 200 and response.json() is True
        events.wait_for(lambda f: f.type == "session.compacted" and f.properties["sessionID"] == sid)
    after = client.get(f"/session/{sid}/message").json()
    assert after[: len(before)] == before  # nothing rewritten
    request, summary = after[len(before) :]
    assert request["parts"][0] == {**request["parts"][0], "type": "compaction", "auto": False}
    assert summary["info"]["summary"] is True and summary["info"]["agent"] == "compaction"
    assert "".join(p["text"] for p in summary["parts"] if p["type"] == "text") == SUMMARY
    summary_request = next(r for r in stub.requests if _is_summary_request(r))
    assert "first question" in summary_request["messages"][-1]["content"]

    client.post(f"/session/{sid}/message", json=text_prompt("third question", model=MODEL))
    latest = _turn_requests(stub)[-1]
    assert [m["role"] for m in latest["messages"]] == ["system", "system", "user"]
    assert latest["messages"][-1] == {"role": "user", "content": "third question"}
    assert SUMMARY in latest["messages"][1]["content"]
    assert not any("first question" in m["content"] for m in latest["messages"])

    context = client.get(f"/api/session/{sid}/context").json()["data"]
    assert context[0]["type"] == "compaction" and context[0]["summary"] == SUMMARY
    assert [m.get("text") for m in context[1:] if m["type"] == "user"] == ["third question"]
    assert len(client.get(f"/session/{sid}/message").json()) == len(after) + 2


@pytest.mark.parametrize("route", ["legacy", "v2"])
def test_a_summarize_repeated_with_its_idempotency_key_summarizes_once(
    stub: OpenAIStub, client: httpx.Client, route: str
) -> None:
    """A retried summarize or V2 compact (same Idempotency-Key, as nginx sends it after the
    replica that had it died) waits for the summary the first began instead of making another."""
    sid = create_session(client)["id"]
    client.post(f"/session/{sid}/message", json=text_prompt("a question", model=MODEL))
    key = {"Idempotency-Key": "summarize-1"}
    if route == "legacy":
        answers = [client.post(f"/session/{sid}/summarize", json=MODEL, headers=key) for _ in "ab"]
        assert [(a.status_code, a.json()) for a in answers] == [(200, True), (200, True)]
    else:
        answers = [client.post(f"/api/session/{sid}/compact", headers=key) for _ in "ab"]
        assert [a.status_code for a in answers] == [204, 204]
    summaries = [m for m in client.get(f"/session/{sid}/message").json() if m["info"].get("summary")]
    assert len(summaries) == 1
    assert sum(_is_summary_request(r) for r in stub.requests) == 1


def test_v2_compact_answers_after_the_summary(stub: OpenAIStub, client: httpx.Client) -> None:
    sid = client.post("/api/session").json()["data"]["id"]
    client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": "hello"}})
    client.post(f"/api/session/{sid}/wait")
    assert client.post(f"/api/session/{sid}/compact").status_code == 204
    kinds = [e["type"] for e in client.get(f"/api/session/{sid}/history", params={"limit": 100}).json()["data"]]
    assert "session.next.compaction.started" in kinds and "session.next.compaction.ended" in kinds
    assert client.get(f"/api/session/{sid}/context").json()["data"][0]["summary"] == SUMMARY


def test_a_small_context_model_compacts_by_itself(project_dir: Path, client: httpx.Client) -> None:
    def heavy(body: dict) -> StubReply:
        reply = _reply(body)
        reply.usage = {"prompt_tokens": 95, "completion_tokens": 3, "total_tokens": 98}
        return reply

    with openai_stub(heavy) as stub:
        _configure(project_dir, stub.url, limit={"context": 100, "output": 10})
        sid = create_session(client)["id"]
        client.post(f"/session/{sid}/message", json=text_prompt("fill the context", model=MODEL))
        client.post("/api/session/" + sid + "/wait")
        messages = client.get(f"/session/{sid}/message").json()
        assert any(p["type"] == "compaction" and p["auto"] is True for m in messages for p in m["parts"])
        assert any(_is_summary_request(r) for r in stub.requests)
        client.post(f"/session/{sid}/message", json=text_prompt("next", model=MODEL))
        assert [m["role"] for m in _turn_requests(stub)[-1]["messages"]] == ["system", "system", "user"]


def test_concurrent_summary_writers_one_wins(database_url: str) -> None:
    async def scenario() -> list[object]:
        db = open_database(database_url)
        await db.open()
        log = EventLog(db, EventBus(16))
        await log.start()
        summaries = Summaries(log, Queries(db))
        try:
            writes = [
                summaries.write("ses_x", replaces=0, through_seq=5, message_id="msg_a", reason="manual", summary=text)
                for text in ("from writer A", "from writer B")
            ]
            results: list[object] = [*await asyncio.gather(*writes, return_exceptions=True)]
            results.append(await summaries.latest("ses_x"))
            return results
        finally:
            await db.close()

    first, second, latest = asyncio.run(scenario())
    outcomes = [first, second]
    winners = [r for r in outcomes if not isinstance(r, Exception)]
    losers = [r for r in outcomes if isinstance(r, Conflict)]
    assert len(winners) == 1 and len(losers) == 1
    assert latest == winners[0] and latest.version == 1  # type: ignore[attr-defined]


async def test_a_steps_window_comes_with_its_work(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain reads each step's session, inputs and window in one query, and the model is sent
    that window (the session's earlier messages are in the request). A prompt answered at once is
    that read, and one finding nothing left where the lease's release cannot tell (one process)."""
    sid = (await runtime.sessions.create(runtime.settings.directory))["id"]
    await runtime.prompting.prompt_and_wait(sid, PromptRequest(parts=[{"type": "text", "text": "first"}]))
    await runtime.prompting.wait_idle(sid)
    reads: list[str] = []
    fetch = runtime.infra.db.fetch

    async def counted(statement: Statement, *args: object, **kwargs: object) -> object:
        reads.append(statement.name)
        return await fetch(statement, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.infra.db, "fetch", counted)
    sent: list[ChatRequest] = []
    stream = EchoProvider.stream

    def recorded(self: EchoProvider, request: ChatRequest) -> object:
        sent.append(request)
        return stream(self, request)

    monkeypatch.setattr(EchoProvider, "stream", recorded)
    await runtime.prompting.prompt_and_wait(sid, PromptRequest(parts=[{"type": "text", "text": "second"}]))
    await runtime.prompting.wait_idle(sid)
    finding_nothing_left = 0 if runtime.coordinator.release_sees_admissions else 1
    assert reads.count("STEP_WORK") == 1 + finding_nothing_left and "WINDOW" not in reads
    contents = [m["content"] for m in sent[0].messages]
    assert [c if isinstance(c, str) else c[0]["text"] for c in contents] == ["first", "Echo: first", "second"]


async def test_a_steps_window_is_one_read_summary_included(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window a step sends the model: the latest summary and the messages after it (every
    message without one), read in one query."""
    sid = (await runtime.sessions.create(runtime.settings.directory))["id"]
    for text in ("one", "two", "three"):
        await runtime.admission.admit(sid, PromptRequest(parts=[{"type": "text", "text": text}], no_reply=True))
    reads: list[object] = []
    fetch = runtime.infra.db.fetch

    async def counted(*args: object, **kwargs: object) -> object:
        if asyncio.current_task() is reading:  # not the relay's reads, running meanwhile
            reads.append(args[0])
        return await fetch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.infra.db, "fetch", counted)
    reading = asyncio.current_task()
    whole = await runtime.summaries.window(sid)
    assert whole.summary is None and len(whole.tail) == 3 and len(reads) == 1
    second = whole.tail[1]["info"]["id"]
    history = await runtime.infra.log.session_since(sid, -1)
    entered = [int(e.seq or 0) for e in history if e.type == "message.updated" and e.properties["info"]["id"] == second]
    await runtime.summaries.write(
        sid, replaces=0, through_seq=entered[-1], message_id=second, reason="manual", summary="s"
    )
    reads.clear()
    later = await runtime.summaries.window(sid)
    assert len(reads) == 1
    assert later.summary is not None and later.summary.text == "s" and later.summary.through_seq == entered[-1]
    assert [m["info"]["id"] for m in later.tail] == [whole.tail[2]["info"]["id"]]
