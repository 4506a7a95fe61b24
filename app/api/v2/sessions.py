"""V2 session routes (``/api/session...``) and the V2 event streams: a second thin translator
over the same runtime as the legacy routes. No delivery, promotion or waiting rule lives here."""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response

from app import ids
from app.api import cursors
from app.api.deps import (
    MAX_INT,
    DirectoryDep,
    EventLogDep,
    EventSourcesDep,
    HistoryDep,
    IdempotencyKeyDep,
    MessageIDPath,
    PromptingDep,
    RevertsDep,
    RuntimeDep,
    SessionIDPath,
    SessionsDep,
    checked_directory,
)
from app.api.responses import JSONBody, json_array
from app.api.sse import (
    HEARTBEAT_COMMENT,
    REPLAY_BATCH,
    StreamSpec,
    frame,
    global_position,
    resume_position,
    session_position,
)
from app.api.v2 import views
from app.api.v2.schemas import AgentBody, ModelBody, PromptBody, RevertStageBody, SessionCreate
from app.events.log import EventLog
from app.jsonutil import dumpb
from app.providers.registry import ModelRef
from app.runtime.errors import InvalidInput
from app.runtime.inputs import PromptRequest
from app.wire import Session

router = APIRouter(prefix="/api", tags=["v2"])

# What OpenCode's server takes as the ``limit`` of one page (it answers 400 past it, which its
# OpenAPI document does not say): messages 200, history events 100.
MessagesLimit = Annotated[int, Query(ge=1, le=200)]
HistoryLimit = Annotated[int, Query(ge=1, le=100)]
Order = Annotated[str | None, Query(pattern="^(asc|desc)$")]
LastEventID = Annotated[str | None, Header(alias="Last-Event-ID")]


def _prompt_request(body: PromptBody, key: str | None) -> PromptRequest:
    """A V2 prompt as the runtime admits it: deferred (its user message is written at promotion),
    with the parts legacy clients will see, and the prompt as V2 clients gave it (file types
    filled in where the client left them out)."""
    view = body.prompt.model_dump(exclude_none=True)
    parts: list[dict[str, Any]] = [{"type": "text", "text": body.prompt.text}]
    for file in view.get("files", []):
        file.setdefault("mime", mimetypes.guess_type(file["uri"])[0] or "application/octet-stream")
        part = {"type": "file", "mime": file["mime"], "url": file["uri"]}
        if file.get("name"):
            part["filename"] = file["name"]
        parts.append(part)
    parts += [{"type": "agent", "name": agent["name"]} for agent in view.get("agents", [])]
    return PromptRequest(
        parts=parts, message_id=body.id, delivery=body.delivery, deferred=True, view=view, request_key=key
    )


@router.get("/health", operation_id="v2.health.get")
async def health() -> Response:
    return JSONBody({"healthy": True})


@router.get("/session", operation_id="v2.session.list", summary="Sessions, newest first, keyset-paged")
async def list_sessions(
    sessions: SessionsDep,
    directory: DirectoryDep,
    limit: Annotated[int, Query(ge=1, le=MAX_INT)] = 50,
    order: Order = None,
    search: str | None = None,
    cursor: str | None = None,
) -> Response:
    """Any ``limit`` (the web app asks for 5000, and takes a shorter page for the end of the list):
    the answer is written a page of sessions at a time, ``cursor.next`` after the last."""
    anchor = None
    if cursor is not None:
        page = cursors.sessions_page(cursor, order)
        order, search, directory, anchor = page.order, page.search, page.directory, page.anchor
    order = order or "desc"
    listed = 0
    last: Session | None = None
    more = False

    async def pages() -> AsyncIterator[bytes]:
        nonlocal listed, last, more
        walk = sessions.walk(
            descending=order == "desc", directory=directory, search=search, anchor=anchor, limit=limit + 1
        )
        async for page in walk:
            taken = page[: limit - listed]
            more = more or len(taken) < len(page)
            if taken:
                listed += len(taken)
                last = taken[-1]
                yield b",".join(dumpb(views.session(info)) for info in taken)

    def tail() -> bytes:
        following: dict[str, str] = {}
        if more and last is not None:
            after = (last["time"]["updated"], last["id"])
            following["next"] = cursors.sessions(cursors.SessionsPage(order, directory, search, after))
        return b'],"cursor":' + dumpb(following) + b"}"

    return await json_array(pages(), head=b'{"data":[', tail=tail)


@router.post("/session", operation_id="v2.session.create")
async def create_session(
    sessions: SessionsDep, directory: DirectoryDep, key: IdempotencyKeyDep, body: SessionCreate | None = None
) -> Response:
    body = body or SessionCreate()  # the SDK sends no body at all for create({})
    location = checked_directory(body.location.directory) if body.location else directory
    info = await sessions.create(
        location,
        request_key=key,
        session_id=body.id,
        agent=body.agent,
        model=body.model.model_dump(exclude_none=True) if body.model else None,
        workspace_id=body.location.workspaceID if body.location else None,
    )
    return JSONBody({"data": views.session(info)})


@router.get("/session/active", operation_id="v2.session.active")
async def active_sessions(runtime: RuntimeDep) -> Response:
    return JSONBody({"data": {sid: {"type": "running"} for sid in await runtime.statuses()}})


@router.get("/session/{sessionID}", operation_id="v2.session.get")
async def get_session(sessions: SessionsDep, sessionID: SessionIDPath) -> Response:
    return JSONBody({"data": views.session(await sessions.get(sessionID))})


@router.post("/session/{sessionID}/agent", operation_id="v2.session.switchAgent", status_code=204)
async def switch_agent(runtime: RuntimeDep, sessionID: SessionIDPath, body: AgentBody) -> Response:
    await runtime.switch(sessionID, agent=body.agent)
    return Response(status_code=204)


@router.post("/session/{sessionID}/model", operation_id="v2.session.switchModel", status_code=204)
async def switch_model(runtime: RuntimeDep, sessionID: SessionIDPath, body: ModelBody) -> Response:
    await runtime.switch(sessionID, model=ModelRef(body.model.providerID, body.model.id), variant=body.model.variant)
    return Response(status_code=204)


@router.post(
    "/session/{sessionID}/prompt",
    operation_id="v2.session.prompt",
    summary="Admit a prompt (steer or queue); idempotent for a client-chosen id",
)
async def prompt(
    prompting: PromptingDep, sessionID: SessionIDPath, body: PromptBody, key: IdempotencyKeyDep
) -> Response:
    admitted = await prompting.prompt(sessionID, _prompt_request(body, key), resume=body.resume)
    return JSONBody({"data": admitted.record.admitted_record()})


@router.post("/session/{sessionID}/interrupt", operation_id="v2.session.interrupt", status_code=204)
async def interrupt(prompting: PromptingDep, sessionID: SessionIDPath) -> Response:
    await prompting.interrupt(sessionID)
    return Response(status_code=204)


@router.post(
    "/session/{sessionID}/wait",
    operation_id="v2.session.wait",
    status_code=204,
    summary="Answer once the session is idle",
)
async def wait(prompting: PromptingDep, sessionID: SessionIDPath) -> Response:
    await prompting.wait_idle(sessionID)
    return Response(status_code=204)


@router.post("/session/{sessionID}/compact", operation_id="v2.session.compact", status_code=204)
async def compact(prompting: PromptingDep, sessionID: SessionIDPath, key: IdempotencyKeyDep) -> Response:
    await prompting.summarize(sessionID, request_key=key)
    return Response(status_code=204)


@router.post("/session/{sessionID}/revert/stage", operation_id="v2.session.revert.stage")
async def revert_stage(reverts: RevertsDep, sessionID: SessionIDPath, body: RevertStageBody) -> Response:
    info = await reverts.stage(sessionID, body.messageID, with_files=bool(body.files))
    return JSONBody({"data": info["revert"]})


@router.post("/session/{sessionID}/revert/clear", operation_id="v2.session.revert.clear", status_code=204)
async def revert_clear(reverts: RevertsDep, sessionID: SessionIDPath) -> Response:
    await reverts.clear(sessionID)
    return Response(status_code=204)


@router.post("/session/{sessionID}/revert/commit", operation_id="v2.session.revert.commit", status_code=204)
async def revert_commit(reverts: RevertsDep, sessionID: SessionIDPath) -> Response:
    await reverts.commit(sessionID)
    return Response(status_code=204)


async def _check_after(event_log: EventLog, session_id: str, after: int | None) -> None:
    """An explicit ``after=`` past the session's last seq (a cursor kept across a database reset)
    would page or stream nothing until the session got that far, and skip what came before:
    refused, naming the problem. (A reconnect's ``Last-Event-ID`` is not: see ``event_source``.)"""
    if after is not None and (head := await event_log.beyond(after, session_id=session_id)) is not None:
        raise InvalidInput(f"after={after} is past the session's last event (seq {head})", kind="Query")


@router.get(
    "/session/{sessionID}/history",
    operation_id="v2.session.history",
    summary="Durable session events after a sequence number",
)
async def history(
    sessions: SessionsDep,
    event_log: EventLogDep,
    sessionID: SessionIDPath,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] | None = None,
    limit: HistoryLimit = 50,
) -> Response:
    await sessions.get(sessionID)
    await _check_after(event_log, sessionID, after)
    events = await event_log.session_since(sessionID, -1 if after is None else after, limit=limit + 1)
    data = b",".join(views.event_json(e, with_location=False) for e in events[:limit])
    more = b"true" if len(events) > limit else b"false"
    return Response(b'{"data":[%s],"hasMore":%s}' % (data, more), media_type="application/json")


@router.get(
    "/session/{sessionID}/event",
    operation_id="v2.session.events",
    summary="Durable session events after a sequence number, then live (SSE)",
)
async def session_events(
    sessions: SessionsDep,
    event_log: EventLogDep,
    sources: EventSourcesDep,
    sessionID: SessionIDPath,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] | None = None,
    last_event_id: LastEventID = None,
) -> Response:
    await sessions.get(sessionID)
    resume = resume_position(last_event_id)
    if resume is None:
        await _check_after(event_log, sessionID, after)
    start = resume if resume is not None else after
    spec = StreamSpec(
        accept=lambda e: e.durable and e.session_id == sessionID,
        session=sessionID,
        encode=lambda e: views.event_json(e, with_location=False),
        kind="v2-session",
        position=session_position,
        replay=lambda position: event_log.session_since(sessionID, position, limit=REPLAY_BATCH),
        beyond=lambda position: event_log.beyond(position, session_id=sessionID),
        heartbeat=lambda: HEARTBEAT_COMMENT,
        unknown=_v2_cursor_unknown,
        overflow=_v2_overflow,
    )
    return await sources.open(spec, -1 if start is None else start)


@router.get(
    "/session/{sessionID}/message",
    operation_id="v2.session.messages",
    summary="Messages, newest first by default, cursor-paged",
)
async def messages(
    sessions: SessionsDep,
    history: HistoryDep,
    sessionID: SessionIDPath,
    limit: MessagesLimit = 50,
    order: Order = None,
    cursor: str | None = None,
) -> Response:
    await sessions.get(sessionID)
    bound = None
    if cursor is not None:
        if order is not None:
            raise InvalidInput("Cursor cannot be combined with order", kind="Query")
        order, bound = cursors.messages_after(cursor)
    order = order or "desc"
    page = await history.page(sessionID, descending=order == "desc", after=bound, limit=limit + 1)
    items = page[:limit]
    around: dict[str, str] = {}
    if items and len(page) > limit:
        around["next"] = cursors.messages(items[-1].id, order, "next")
    if items and bound is not None:
        around["previous"] = cursors.messages(items[0].id, "asc" if order == "desc" else "desc", "previous")
    return JSONBody({"data": [views.message(m.decode()) for m in items], "cursor": around})


@router.get("/session/{sessionID}/message/{messageID}", operation_id="v2.session.message")
async def message(history: HistoryDep, sessionID: SessionIDPath, messageID: MessageIDPath) -> Response:
    return JSONBody({"data": views.message(await history.get_message(sessionID, messageID))})


@router.get(
    "/session/{sessionID}/context",
    operation_id="v2.session.context",
    summary="What the model sees next: the messages after the last compaction",
)
async def context(runtime: RuntimeDep, sessionID: SessionIDPath) -> Response:
    window = await runtime.context(sessionID)
    data = [views.summary(window.summary)] if window.summary else []
    return JSONBody({"data": data + [views.message(m) for m in window.tail]})


def _v2_notice(event_type: bytes, position: int, data: bytes = b"") -> bytes:
    """A V2 frame that is not an event of the log, saying where to resume: after ``position``
    (``resume``, and ``after`` for the query), or from the start when it is below 0."""
    if position < 0:
        return frame(b'{"id":"%s","type":"%s","data":{%s}}' % (ids.event_id().encode(), event_type, data))
    where = b'"resume":"%d","after":%d' % (position, position)
    body = b'{"id":"%s","type":"%s","data":{%s}}' % (ids.event_id().encode(), event_type, data + where)
    return frame(body, position)


def _v2_overflow(position: int) -> bytes:
    """The last frame of a subscriber cut off for falling behind: resume after ``position``."""
    return _v2_notice(b"server.overflow", position)


def _v2_cursor_unknown(requested: int, head: int) -> bytes:
    """The ``Last-Event-ID`` resumed from is past the log's head: the stream starts there."""
    return _v2_notice(b"server.cursor.unknown", head, b'"lastEventID":"%d",' % requested)


def _v2_connected(_origin: int) -> bytes:
    return frame(b'{"id":"%s","type":"server.connected","data":{}}' % ids.event_id().encode())


@router.get("/event", operation_id="v2.event.subscribe", summary="Every event, deltas included (SSE)")
async def all_events(event_log: EventLogDep, sources: EventSourcesDep, last_event_id: LastEventID = None) -> Response:
    resume = resume_position(last_event_id)

    spec = StreamSpec(
        accept=lambda _e: True,
        encode=lambda e: views.event_json(e, with_location=True),
        kind="v2",
        position=global_position,
        replay=lambda position: event_log.since(position, limit=REPLAY_BATCH),
        beyond=event_log.beyond,
        connected=_v2_connected,
        heartbeat=lambda: HEARTBEAT_COMMENT,
        unknown=_v2_cursor_unknown,
        overflow=_v2_overflow,
    )
    return await sources.open(spec, resume)
