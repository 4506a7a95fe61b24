"""The read-only pages of shared sessions: ``/share/:token`` (HTML that updates live),
``/share/:token/data`` (JSON), ``/share/:token/transcript`` (the page's transcript, re-fetched by
the page on change) and ``/share/:token/event`` (that session's events only, SSE).

The unguessable token is the credential: these routes stay readable when the server has a
password (see ``BasicAuth``), and only a valid, unrevoked token reaches a transcript."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from starlette.responses import HTMLResponse

from app.api.deps import EventLogDep, EventSourcesDep, SharesDep
from app.api.responses import JSONBody
from app.api.sse import (
    REPLAY_BATCH,
    StreamSpec,
    control_frame,
    global_position,
    legacy_envelope,
    overflow_frame,
)

router = APIRouter(tags=["share"])

ShareToken = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Share token")]


@router.get(
    "/share/{token}",
    operation_id="share.page",
    response_class=HTMLResponse,
    summary="Read-only page of a shared session",
)
async def page(shares: SharesDep, token: ShareToken) -> Response:
    session, messages = await shares.shared(token)
    from app.api import share_page  # markdown and highlighting load on first use (start-up time)

    return HTMLResponse(share_page.page(session, messages))


@router.get(
    "/share/{token}/transcript",
    operation_id="share.transcript",
    response_class=HTMLResponse,
    summary="The rendered transcript of a shared session (what the page refreshes)",
)
async def transcript(shares: SharesDep, token: ShareToken) -> Response:
    _session, messages = await shares.shared(token)
    from app.api import share_page

    return HTMLResponse(share_page.transcript(messages), headers={"Cache-Control": "no-store"})


@router.get("/share/{token}/data", operation_id="share.data", summary="A shared session and its messages")
async def data(shares: SharesDep, token: ShareToken) -> Response:
    session, messages = await shares.shared(token)
    return JSONBody({"session": session, "messages": messages})


@router.get("/share/{token}/event", operation_id="share.event", summary="A shared session's events (SSE)")
async def events(shares: SharesDep, event_log: EventLogDep, sources: EventSourcesDep, token: ShareToken) -> Response:
    """Live events of the shared session only (``{id, type, properties}`` frames, as ``/event``);
    no replay: the page fetches the transcript when the stream opens. Revoking the share ends
    the stream: its last frame is the session's update (or deletion) that revoked it."""
    session, _messages = await shares.shared(token)
    session_id = session["id"]
    spec = StreamSpec(
        accept=lambda e: e.session_id == session_id and not e.is_next,
        session=session_id,
        encode=legacy_envelope,
        kind="legacy",
        position=global_position,
        replay=lambda after: event_log.since(after, limit=REPLAY_BATCH),
        beyond=event_log.beyond,
        connected=lambda origin: control_frame("server.connected", position=origin),
        heartbeat=lambda: control_frame("server.heartbeat"),
        overflow=overflow_frame,
        last=shares.revokes,
        still_allowed=lambda: shares.serves(token, session_id),
    )
    return await sources.open(spec, None)
