"""Legacy session routes (``/session...``): thin translations onto the runtime."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from app.api import cursors, stainless
from app.api.deps import (
    ID_PATTERN,
    MAX_INT,
    CommandsDep,
    DiffsDep,
    DirectoryDep,
    HistoryDep,
    IdempotencyKeyDep,
    MessageIDPath,
    PartIDPath,
    PromptingDep,
    RevertsDep,
    RuntimeDep,
    SessionIDPath,
    SessionsDep,
    SharesDep,
    TodosDep,
)
from app.api.legacy.schemas import (
    CommandBody,
    ForkBody,
    InitBody,
    PartBody,
    PromptBody,
    RevertBody,
    SessionCreate,
    SessionUpdate,
    ShellBody,
    SummarizeBody,
)
from app.api.responses import JSONBody, json_array, raw_messages_json
from app.jsonutil import dumpb, loads
from app.providers.registry import ModelRef
from app.runtime.errors import InvalidInput, MessageNotFound
from app.runtime.inputs import PromptRequest
from app.wire import Session

router = APIRouter(tags=["session"])

# A page of messages holds at most this many: a larger ``limit`` (OpenCode takes any) is served as
# this many, with ``x-next-cursor`` for the older ones.
MESSAGES_PAGE = 10_000

_SESSION_DOC: dict[int | str, dict[str, Any]] = {200: {"description": "Session info (OpenCode's Session schema)"}}


def _prompt_request(body: PromptBody, key: str | None) -> PromptRequest:
    return PromptRequest(
        parts=[part.model_dump(exclude_none=True) for part in body.parts],
        message_id=body.messageID,
        model=ModelRef(body.model.providerID, body.model.modelID) if body.model else None,
        agent=body.agent,
        system=body.system,
        no_reply=bool(body.noReply),
        tools=body.tools,
        variant=body.variant,
        request_key=key,
    )


@router.get("/session", operation_id="session.list", summary="List sessions")
async def list_sessions(
    sessions: SessionsDep,
    directory: DirectoryDep,
    roots: Annotated[bool | None, Query()] = None,
    start: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Only sessions updated at or after (ms)")] = None,
    search: str | None = None,
    limit: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
) -> Response:
    """Any ``limit``, as OpenCode (clients ask for thousands, and this list has no next page): the
    answer is written a page of sessions at a time."""
    walk = sessions.walk(
        descending=True,
        directory=directory,
        search=search,
        roots=bool(roots),
        start=start,
        limit=limit if limit is not None else 100,
    )
    return await json_array(b",".join(dumpb(info) for info in page) async for page in walk)


# What one page of ``/experimental/session`` holds at most: a larger ``limit`` is served as this
# many, with ``x-next-cursor`` for the rest (its sessions are gathered before the header is sent).
EXPERIMENTAL_PAGE = 10_000


@router.get("/experimental/session", operation_id="experimental.session.list", summary="List sessions")
async def sessions_everywhere(
    sessions: SessionsDep,
    directory: Annotated[str | None, Query(description="Only this directory's sessions")] = None,
    roots: Annotated[bool | None, Query()] = None,
    start: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Only sessions updated at or after (ms)")] = None,
    cursor: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Only sessions updated before (ms)")] = None,
    search: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_INT)] = 100,
    archived: Annotated[bool | None, Query(description="Include archived sessions")] = None,
) -> Response:
    """Sessions of every project, most recently updated first, each with its ``project``; when
    there are more, the ``x-next-cursor`` header is the ``cursor`` of the next page."""
    listed, next_cursor = await sessions.across_projects(
        directory=directory,
        roots=bool(roots),
        start=start,
        before=cursor,
        search=search,
        archived=bool(archived),
        limit=min(limit, EXPERIMENTAL_PAGE),
    )
    headers = {"x-next-cursor": str(next_cursor)} if next_cursor is not None else None
    return JSONBody(listed, headers=headers)


@router.post("/session", operation_id="session.create", summary="Create a session", responses=_SESSION_DOC)
async def create_session(
    sessions: SessionsDep, directory: DirectoryDep, key: IdempotencyKeyDep, body: SessionCreate | None = None
) -> Response:
    body = body or SessionCreate()
    info = await sessions.create(
        directory,
        request_key=key,
        parent_id=body.parentID,
        title=body.title,
        permission=[rule.model_dump() for rule in body.permission] if body.permission is not None else None,
        metadata=body.metadata,
        workspace_id=body.workspaceID,
        agent=body.agent,
        model=body.model.model_dump(exclude_none=True) if body.model else None,
    )
    return JSONBody(info)


@router.get("/session/status", operation_id="session.status", summary="Status of every non-idle session")
async def session_status(runtime: RuntimeDep) -> Response:
    return JSONBody(await runtime.statuses())


@router.get("/session/{sessionID}", operation_id="session.get", responses=_SESSION_DOC)
async def get_session(sessions: SessionsDep, sessionID: SessionIDPath) -> Response:
    return JSONBody(await sessions.get(sessionID))


@router.patch("/session/{sessionID}", operation_id="session.update", responses=_SESSION_DOC)
async def update_session(sessions: SessionsDep, sessionID: SessionIDPath, body: SessionUpdate) -> Response:
    def change(info: Session) -> None:
        if body.title is not None:
            info["title"] = body.title
        if body.metadata is not None:
            info["metadata"] = body.metadata
        if body.permission is not None:
            info["permission"] = [rule.model_dump() for rule in body.permission]
        if body.time is not None and body.time.archived is not None:
            info["time"]["archived"] = body.time.archived

    await sessions.get(sessionID)
    return JSONBody(await sessions.update(sessionID, change))


@router.delete("/session/{sessionID}", operation_id="session.delete")
async def delete_session(runtime: RuntimeDep, sessionID: SessionIDPath) -> Response:
    await runtime.delete_session(sessionID)
    return JSONBody(True)


@router.get("/session/{sessionID}/children", operation_id="session.children")
async def session_children(sessions: SessionsDep, sessionID: SessionIDPath) -> Response:
    return JSONBody(await sessions.children(sessionID))


@router.get("/session/{sessionID}/todo", operation_id="session.todo")
async def session_todo(sessions: SessionsDep, todos: TodosDep, sessionID: SessionIDPath) -> Response:
    await sessions.get(sessionID)
    return JSONBody(await todos.get(sessionID))


@router.get(
    "/session/{sessionID}/diff",
    operation_id="session.diff",
    summary="The files the session changed (or, with messageID, the changes answering that prompt)",
)
async def session_diff(
    sessions: SessionsDep,
    diffs: DiffsDep,
    sessionID: SessionIDPath,
    messageID: Annotated[str | None, Query(pattern=ID_PATTERN.format(prefix="msg"))] = None,
) -> Response:
    session = await sessions.get(sessionID)
    if messageID is not None:
        return JSONBody(await diffs.of_message(session, messageID))
    return JSONBody(await diffs.of_session(session))


@router.get("/session/{sessionID}/message", operation_id="session.messages", summary="Messages, oldest first")
async def list_messages(
    request: Request,
    sessions: SessionsDep,
    history: HistoryDep,
    sessionID: SessionIDPath,
    limit: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Newest N messages")] = None,
    before: Annotated[str | None, Query(description="Cursor from x-next-cursor")] = None,
) -> Response:
    await sessions.get(sessionID)
    if before is not None and limit is None:
        raise InvalidInput("before requires limit", kind="Query")
    before_id = cursors.before_message(before) if before is not None else None
    encode = stainless.messages_json if stainless.speaks(request) else (lambda raw: raw)
    if limit is None:
        raw = raw_messages_json(await history.raw_messages(sessionID))
        return Response(encode(raw), media_type="application/json")
    limit = min(limit, MESSAGES_PAGE)
    page = await history.raw_messages(sessionID, limit=limit + 1, before=before_id)
    more = len(page) > limit
    page = page[len(page) - limit :] if limit else []
    response = Response(encode(raw_messages_json(page)), media_type="application/json")
    response.headers["Access-Control-Expose-Headers"] = "Link, X-Next-Cursor"
    if more and page:
        cursor = cursors.older_messages(page[0].id, loads(page[0].info)["time"]["created"])
        response.headers["X-Next-Cursor"] = cursor
        response.headers["Link"] = f'<{request.url.path}?limit={limit}&before={cursor}>; rel="next"'
    return response


@router.get("/session/{sessionID}/message/{messageID}", operation_id="session.message")
async def get_message(history: HistoryDep, sessionID: SessionIDPath, messageID: MessageIDPath) -> Response:
    return JSONBody(await history.get_message(sessionID, messageID))


@router.post(
    "/session/{sessionID}/message", operation_id="session.prompt", summary="Send a prompt and wait for the reply"
)
async def prompt(
    request: Request, prompting: PromptingDep, sessionID: SessionIDPath, body: PromptBody, key: IdempotencyKeyDep
) -> Response:
    reply = await prompting.prompt_and_wait(sessionID, _prompt_request(body, key))
    if stainless.speaks(request):  # 0.x answered the assistant message's info alone
        return JSONBody(stainless.message_info(reply["info"]))
    return JSONBody(reply)


@router.post(
    "/session/{sessionID}/prompt_async",
    operation_id="session.prompt_async",
    status_code=204,
    summary="Admit a prompt and return at once",
)
async def prompt_async(
    prompting: PromptingDep, sessionID: SessionIDPath, body: PromptBody, key: IdempotencyKeyDep
) -> Response:
    await prompting.prompt(sessionID, _prompt_request(body, key))
    return Response(status_code=204)


@router.post("/session/{sessionID}/abort", operation_id="session.abort")
async def abort(prompting: PromptingDep, sessionID: SessionIDPath) -> Response:
    await prompting.abort(sessionID)
    return JSONBody(True)


@router.post(
    "/session/{sessionID}/revert",
    operation_id="session.revert",
    responses=_SESSION_DOC,
    summary="Mark a message to go back to; the next prompt removes it and what follows",
)
async def revert(reverts: RevertsDep, sessions: SessionsDep, sessionID: SessionIDPath, body: RevertBody) -> Response:
    try:
        return JSONBody(await reverts.stage(sessionID, body.messageID, body.partID))
    except MessageNotFound:
        return JSONBody(await sessions.get(sessionID))  # OpenCode: unknown message, unchanged


@router.post("/session/{sessionID}/unrevert", operation_id="session.unrevert", responses=_SESSION_DOC)
async def unrevert(reverts: RevertsDep, sessionID: SessionIDPath) -> Response:
    return JSONBody(await reverts.clear(sessionID))


@router.post(
    "/session/{sessionID}/fork",
    operation_id="session.fork",
    responses=_SESSION_DOC,
    summary="Copy the messages before messageID (all when omitted) into a new session",
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "properties": {"messageID": {"type": "string", "pattern": "^msg"}}}
                }
            },
        }
    },
)
async def fork(request: Request, history: HistoryDep, sessionID: SessionIDPath, key: IdempotencyKeyDep) -> Response:
    raw = await request.body()
    try:
        body = ForkBody.model_validate_json(raw) if raw.strip() else ForkBody()  # an empty body is fine
    except ValidationError as exc:
        raise InvalidInput(f"Invalid fork body: {exc.errors()[0]['msg']}") from exc
    return JSONBody(await history.fork(sessionID, body.messageID, request_key=key))


@router.delete("/session/{sessionID}/message/{messageID}", operation_id="session.deleteMessage")
async def delete_message(history: HistoryDep, sessionID: SessionIDPath, messageID: MessageIDPath) -> Response:
    await history.delete_message(sessionID, messageID)
    return JSONBody(True)


@router.delete("/session/{sessionID}/message/{messageID}/part/{partID}", operation_id="part.delete")
async def delete_part(
    history: HistoryDep, sessionID: SessionIDPath, messageID: MessageIDPath, partID: PartIDPath
) -> Response:
    await history.delete_part(sessionID, messageID, partID)
    return JSONBody(True)


@router.patch("/session/{sessionID}/message/{messageID}/part/{partID}", operation_id="part.update")
async def update_part(
    history: HistoryDep, sessionID: SessionIDPath, messageID: MessageIDPath, partID: PartIDPath, body: PartBody
) -> Response:
    if body.id != partID:
        raise InvalidInput("part.id must match the path")
    return JSONBody(await history.update_part(sessionID, messageID, body.model_dump(exclude_none=True)))


@router.post("/session/{sessionID}/share", operation_id="session.share", responses=_SESSION_DOC)
async def share(request: Request, shares: SharesDep, sessionID: SessionIDPath) -> Response:
    return JSONBody(await shares.share(sessionID, str(request.base_url)))


@router.delete("/session/{sessionID}/share", operation_id="session.unshare", responses=_SESSION_DOC)
async def unshare(shares: SharesDep, sessionID: SessionIDPath) -> Response:
    return JSONBody(await shares.unshare(sessionID))


@router.post(
    "/session/{sessionID}/summarize",
    operation_id="session.summarize",
    summary="Compact the history into a summary the model continues from; answers once done",
)
async def summarize(
    prompting: PromptingDep, sessionID: SessionIDPath, body: SummarizeBody, key: IdempotencyKeyDep
) -> Response:
    await prompting.summarize(sessionID, ModelRef(body.providerID, body.modelID), request_key=key)
    return JSONBody(True)


@router.post(
    "/session/{sessionID}/shell",
    operation_id="session.shell",
    summary="Run a command as the user; recorded with a completed bash part",
)
async def shell(commands: CommandsDep, sessionID: SessionIDPath, body: ShellBody, key: IdempotencyKeyDep) -> Response:
    model = ModelRef(body.model.providerID, body.model.modelID) if body.model else None
    return JSONBody(await commands.shell(sessionID, body.command, agent=body.agent, model=model, request_key=key))


@router.post(
    "/session/{sessionID}/init",
    operation_id="session.init",
    summary="Have the model write the project's AGENTS.md (the built-in init command); true when done",
)
async def init(commands: CommandsDep, sessionID: SessionIDPath, body: InitBody, key: IdempotencyKeyDep) -> Response:
    model = f"{body.providerID}/{body.modelID}"
    await commands.command(sessionID, "init", "", model=model, message_id=body.messageID, request_key=key)
    return JSONBody(True)


@router.post(
    "/session/{sessionID}/command",
    operation_id="session.command",
    summary="Run a project command (opencode.json) as a prompt and wait for the reply",
)
async def command(
    commands: CommandsDep, sessionID: SessionIDPath, body: CommandBody, key: IdempotencyKeyDep
) -> Response:
    reply = await commands.command(
        sessionID,
        body.command,
        body.arguments,
        agent=body.agent,
        model=body.model,
        message_id=body.messageID,
        variant=body.variant,
        request_key=key,
    )
    return JSONBody(reply)
