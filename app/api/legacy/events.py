"""Legacy event streams: ``/event`` (one instance directory, ``{id, type, properties}`` frames)
and ``/global/event`` (every directory, ``{directory, payload}`` frames plus a ``sync`` twin for
each durable event, as the OpenCode TUI consumes them)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header
from sse_starlette import ServerSentEvent
from starlette.responses import Response

from app import ids
from app.api.deps import DirectoryDep, RuntimeDep
from app.api.sse import REPLAY_BATCH, StreamSpec, envelope, event_source, global_position, resume_position, sse
from app.events.model import Event
from app.jsonutil import dumpb
from app.runtime.project import cached_project_id
from app.runtime.service import Runtime

router = APIRouter(tags=["event"])


def _legacy(event: Event) -> bytes:
    return dumpb(envelope(event.type, event.properties, event.id))


def _global_frame(event: Event, payload: dict[str, Any]) -> bytes:
    frame: dict[str, Any] = {"directory": event.directory or "global"}
    project = cached_project_id(event.directory) if event.directory else None
    if project is not None:
        frame["project"] = project
    frame["payload"] = payload
    return dumpb(frame)


def _global(event: Event) -> bytes:
    # V2 events reach legacy clients only as sync twins, which keep each session's seq gap-free.
    if event.is_next:
        return b""
    return _global_frame(event, envelope(event.type, event.properties, event.id))


def _sync_twin(event: Event) -> bytes:
    sync = {
        "id": event.id,
        "type": f"{event.type}.{event.version}",
        "seq": event.seq,
        "aggregateID": event.session_id,
        "data": event.properties,
    }
    return _global_frame(event, {"type": "sync", "syncEvent": sync, "id": event.id})


def _control(runtime: Runtime, event_type: str, *, wrap: bool) -> ServerSentEvent:
    payload = envelope(event_type, {}, ids.event_id())
    return sse(dumpb({"payload": payload} if wrap else payload), runtime.bus.cursor)


LastEventID = Annotated[str | None, Header(alias="Last-Event-ID")]


@router.get("/event", operation_id="event.subscribe", summary="Events of one instance directory (SSE)")
async def subscribe(runtime: RuntimeDep, directory: DirectoryDep, last_event_id: LastEventID = None) -> Response:
    spec = StreamSpec(
        accept=lambda e: e.directory == directory and not e.is_next,
        encode=_legacy,
        kind="legacy",
        position=global_position,
        replay=lambda after: runtime.log.since(after, limit=REPLAY_BATCH, directory=directory),
        connected=lambda: _control(runtime, "server.connected", wrap=False),
        heartbeat=lambda: _control(runtime, "server.heartbeat", wrap=False),
    )
    return event_source(runtime, spec, resume_position(last_event_id))


@router.get("/global/event", operation_id="global.event", summary="Events of every directory (SSE)")
async def global_subscribe(runtime: RuntimeDep, last_event_id: LastEventID = None) -> Response:
    spec = StreamSpec(
        accept=lambda _e: True,
        encode=_global,
        kind="global",
        position=global_position,
        replay=lambda after: runtime.log.since(after, limit=REPLAY_BATCH),
        connected=lambda: _control(runtime, "server.connected", wrap=True),
        heartbeat=lambda: _control(runtime, "server.heartbeat", wrap=True),
        twin=_sync_twin,
    )
    return event_source(runtime, spec, resume_position(last_event_id))
