"""How V2 clients see the one runtime: sessions (``SessionV2Info``), messages (``SessionMessage``)
and events (``{id, type, durable?, location?, data}``), derived from the same rows and events the
legacy API serves, so a session is one thing whichever protocol reads it."""

from __future__ import annotations

from typing import Any

from app.events.model import Event
from app.jsonutil import dumpb
from app.runtime.history import MessageWithParts, Snapshot


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _tokens(tokens: dict[str, Any] | None) -> dict[str, Any]:
    tokens = tokens or {}
    cache = tokens.get("cache") or {}
    return {
        "input": tokens.get("input", 0),
        "output": tokens.get("output", 0),
        "reasoning": tokens.get("reasoning", 0),
        "cache": {"read": cache.get("read", 0), "write": cache.get("write", 0)},
    }


def session(info: dict[str, Any]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": info["id"],
        "projectID": info["projectID"],
        "cost": info.get("cost", 0),
        "tokens": _tokens(info.get("tokens")),
        "time": {k: v for k, v in info["time"].items() if k in ("created", "updated", "archived")},
        "title": info["title"],
        "location": {"directory": info["directory"]}
        | ({"workspaceID": info["workspaceID"]} if info.get("workspaceID") else {}),
    }
    for key in ("parentID", "agent", "revert"):
        if info.get(key):
            view[key] = info[key]
    if info.get("model"):
        view["model"] = {k: v for k, v in info["model"].items() if k in ("id", "providerID", "variant")}
    return view


def _user(info: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": info["id"],
        "time": {"created": info["time"]["created"]},
        "text": "".join(_str(p.get("text")) for p in parts if p["type"] == "text" and not p.get("synthetic")),
        "type": "user",
    }
    files = [
        {"uri": _str(p.get("url")), "mime": _str(p.get("mime"))}
        | ({"name": p["filename"]} if p.get("filename") else {})
        for p in parts
        if p["type"] == "file"
    ]
    agents = [{"name": _str(p.get("name"))} for p in parts if p["type"] == "agent"]
    if files:
        view["files"] = files
    if agents:
        view["agents"] = agents
    return view


def _content(part: dict[str, Any]) -> dict[str, Any] | None:
    if part["type"] == "text":
        return {"type": "text", "id": part["id"], "text": part.get("text", "")}
    if part["type"] == "reasoning":
        content = {"type": "reasoning", "id": part["id"], "text": part.get("text", "")}
        if part.get("time"):
            content["time"] = part["time"]
        return content
    return None


def _assistant(info: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": info["id"],
        "time": {k: v for k, v in info["time"].items() if k in ("created", "completed")},
        "type": "assistant",
        "agent": info.get("agent", "build"),
        "model": {"id": info.get("modelID", ""), "providerID": info.get("providerID", "")},
        "content": [c for c in map(_content, parts) if c is not None],
        "cost": info.get("cost", 0),
        "tokens": _tokens(info.get("tokens")),
    }
    if info.get("finish"):
        view["finish"] = info["finish"]
    if info.get("error"):
        error = info["error"]
        view["finish"] = view.get("finish", "error")
        view["error"] = {"type": "unknown", "message": str((error.get("data") or {}).get("message") or error["name"])}
    return view


def message(message: MessageWithParts) -> dict[str, Any]:
    info, parts = message["info"], message["parts"]
    return _user(info, parts) if info["role"] == "user" else _assistant(info, parts)


def event_json(event: Event, *, with_location: bool) -> bytes:
    """``event()`` encoded, with the stored payload spliced in rather than re-encoded."""
    head: dict[str, Any] = {"id": event.id, "type": event.type}
    if event.durable:
        head["durable"] = {"aggregateID": event.session_id, "seq": event.seq, "version": event.version}
    if with_location and event.directory:
        head["location"] = {"directory": event.directory}
    return dumpb(head)[:-1] + b',"data":' + event.properties_json() + b"}"


def snapshot(snapshot: Snapshot) -> dict[str, Any]:
    """A compaction snapshot as the ``compaction`` message that opens the model's context."""
    return {
        "id": snapshot.message_id,
        "time": {"created": snapshot.time_created},
        "type": "compaction",
        "reason": snapshot.reason,
        "summary": snapshot.summary,
        "recent": "",
    }
