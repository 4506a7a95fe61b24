"""Legacy event streams: ``/event`` (one instance directory, ``{id, type, properties}`` frames)
and ``/global/event`` (every directory, ``{directory, payload}`` frames plus a ``sync`` twin for
each durable event, as the OpenCode TUI consumes them)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from starlette.responses import Response

from app.api import stainless
from app.api.deps import DirectoryDep, EventLogDep, EventSourcesDep
from app.api.sse import (
    HEARTBEAT_COMMENT,
    REPLAY_BATCH,
    StreamSpec,
    control_frame,
    cursor_unknown_frame,
    global_position,
    legacy_envelope,
    overflow_frame,
    resume_position,
)
from app.events.model import Event
from app.jsonutil import dumpb
from app.runtime.service import INSTANCE_DISPOSED
from app.runtime.sessions import cached_project_id

router = APIRouter(tags=["event"])


def _global_frame(event: Event, payload: bytes) -> bytes:
    """``{"directory", "project"?, "payload"}`` with the (already encoded) payload spliced in."""
    header: dict[str, Any] = {"directory": event.directory or "global"}
    project = cached_project_id(event.directory) if event.directory else None
    if project is not None:
        header["project"] = project
    return dumpb(header)[:-1] + b',"payload":' + payload + b"}"


def _global(event: Event) -> bytes:
    # V2 events reach legacy clients only as sync twins, which keep each session's seq gap-free.
    if event.is_next:
        return b""
    return _global_frame(event, legacy_envelope(event))


def _sync_twin(event: Event) -> bytes:
    head = dumpb(
        {"id": event.id, "type": f"{event.type}.{event.version}", "seq": event.seq, "aggregateID": event.session_id}
    )
    sync = head[:-1] + b',"data":' + event.properties_json() + b"}"
    return _global_frame(event, b'{"type":"sync","syncEvent":%s,"id":"%s"}' % (sync, event.id.encode()))


LastEventID = Annotated[str | None, Header(alias="Last-Event-ID")]


def _stainless_envelope(event: Event) -> bytes:
    """The 0.x SDKs' event shape (``app/api/stainless.py``); b"" for events they have no type for."""
    translated = stainless.event(event.type, event.properties)
    return dumpb({"id": event.id, **translated}) if translated is not None else b""


@router.get("/event", operation_id="event.subscribe", summary="Events of one instance directory (SSE)")
async def subscribe(
    request: Request,
    event_log: EventLogDep,
    sources: EventSourcesDep,
    directory: DirectoryDep,
    last_event_id: LastEventID = None,
) -> Response:
    old_sdk = stainless.speaks(request)
    spec = StreamSpec(
        accept=lambda e: e.directory == directory and not e.is_next,
        directory=directory,
        encode=_stainless_envelope if old_sdk else legacy_envelope,
        kind="stainless" if old_sdk else "legacy",
        position=global_position,
        replay=lambda after: event_log.since(after, limit=REPLAY_BATCH, directory=directory),
        beyond=event_log.beyond,
        connected=lambda origin: control_frame("server.connected", position=origin),
        unknown=None if old_sdk else cursor_unknown_frame,
        # 0.x has no heartbeat event: an SSE comment keeps the connection alive all the same.
        heartbeat=(lambda: HEARTBEAT_COMMENT) if old_sdk else (lambda: control_frame("server.heartbeat")),
        overflow=None if old_sdk else overflow_frame,
        last=None if old_sdk else (lambda e: e.type == INSTANCE_DISPOSED),
    )
    return await sources.open(spec, resume_position(last_event_id))


@router.get("/global/event", operation_id="global.event", summary="Events of every directory (SSE)")
async def global_subscribe(
    event_log: EventLogDep, sources: EventSourcesDep, last_event_id: LastEventID = None
) -> Response:
    spec = StreamSpec(
        accept=lambda _e: True,
        encode=_global,
        kind="global",
        position=global_position,
        replay=lambda after: event_log.since(after, limit=REPLAY_BATCH),
        beyond=event_log.beyond,
        connected=lambda origin: control_frame("server.connected", position=origin, wrap=True),
        unknown=lambda requested, head: cursor_unknown_frame(requested, head, wrap=True),
        heartbeat=lambda: control_frame("server.heartbeat", wrap=True),
        overflow=lambda position: overflow_frame(position, wrap=True),
        twin=_sync_twin,
    )
    return await sources.open(spec, resume_position(last_event_id))
