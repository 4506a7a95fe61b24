"""Legacy event streams: ``/event`` (one instance directory, ``{id, type, properties}`` frames)
and ``/global/event`` (every directory, ``{directory, payload}`` frames plus a ``sync`` twin for
each durable event, as the OpenCode TUI consumes them)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from starlette.responses import Response

from app import ids
from app.api.deps import DirectoryDep, RuntimeDep
from app.api.errors import bad_request
from app.api.sse import envelope, event_source, parse_cursor
from app.events.model import Event
from app.jsonutil import dumpb
from app.runtime.project import cached_project_id

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


def _legacy_control(event_type: str) -> bytes:
    return dumpb(envelope(event_type, {}, ids.event_id()))


def _global_control(event_type: str) -> bytes:
    return dumpb({"payload": envelope(event_type, {}, ids.event_id())})


LastEventID = Annotated[str | None, Header(alias="Last-Event-ID")]


@router.get("/event", operation_id="event.subscribe", summary="Events of one instance directory (SSE)")
async def subscribe(runtime: RuntimeDep, directory: DirectoryDep, last_event_id: LastEventID = None) -> Response:
    try:
        after = parse_cursor(last_event_id)
    except ValueError:
        return bad_request("Last-Event-ID must be an event id sent by this server", "Headers")
    return event_source(
        runtime,
        accept=lambda e: e.directory == directory and not e.is_next,
        kind="legacy",
        encode=_legacy,
        control=_legacy_control,
        after=after,
        replay_directory=directory,
    )


@router.get("/global/event", operation_id="global.event", summary="Events of every directory (SSE)")
async def global_subscribe(request: Request, runtime: RuntimeDep, last_event_id: LastEventID = None) -> Response:
    try:
        after = parse_cursor(last_event_id)
    except ValueError:
        return bad_request("Last-Event-ID must be an event id sent by this server", "Headers")
    return event_source(
        runtime,
        accept=lambda _e: True,
        kind="global",
        encode=_global,
        control=_global_control,
        after=after,
        twin=_sync_twin,
    )
