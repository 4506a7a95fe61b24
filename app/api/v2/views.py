"""How V2 clients see the one runtime: sessions (``SessionV2Info``), messages (``SessionMessage``)
and events (``{id, type, durable?, location?, data}``), derived from the same rows and events the
legacy API serves, so a session is one thing whichever protocol reads it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from app.events.model import Event
from app.jsonutil import dumpb
from app.runtime.history import MessageWithParts, Summary
from app.wire import AssistantMessage, Part, Session, UserMessage


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


def session(info: Session) -> dict[str, Any]:
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


def _user(info: UserMessage, parts: list[Part]) -> dict[str, Any]:
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


def _content(part: Mapping[str, Any]) -> dict[str, Any] | None:
    if part["type"] == "text":
        return {"type": "text", "id": part["id"], "text": part.get("text", "")}
    if part["type"] == "reasoning":
        content = {"type": "reasoning", "id": part["id"], "text": part.get("text", "")}
        if part.get("time"):
            content["time"] = part["time"]
        return content
    return None


def _assistant(info: AssistantMessage, parts: list[Part]) -> dict[str, Any]:
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


def summary(summary: Summary) -> dict[str, Any]:
    """A compaction summary as the ``compaction`` message that opens the model's context."""
    return {
        "id": summary.message_id,
        "time": {"created": summary.time_created},
        "type": "compaction",
        "reason": summary.reason,
        "summary": summary.text,
        "recent": "",
    }


def _model_ref(value: Any) -> dict[str, str] | None:
    """``"provider/model"`` (config) or ``{providerID, modelID}`` (legacy wire) as a V2 ModelRef."""
    if isinstance(value, str) and "/" in value:
        provider_id, model_id = value.split("/", 1)
        return {"id": model_id, "providerID": provider_id}
    if isinstance(value, dict) and value.get("providerID") and value.get("modelID"):
        return {"id": value["modelID"], "providerID": value["providerID"]}
    return None


def agent(wire: dict[str, Any]) -> dict[str, Any]:
    """``AgentV2Info`` from the legacy Agent shape; rules become ``{action, resource, effect}``."""
    view: dict[str, Any] = {"id": wire["name"], "request": {"headers": {}, "body": {}}}
    if wire.get("prompt"):
        view["system"] = wire["prompt"]
    if wire.get("description"):
        view["description"] = wire["description"]
    view |= {"mode": wire["mode"], "hidden": bool(wire.get("hidden", False))}
    if model := _model_ref(wire.get("model")):
        view["model"] = model
    view["permissions"] = [
        {"action": r["permission"], "resource": r["pattern"], "effect": r["action"]} for r in wire["permission"]
    ]
    return view


def command(wire: dict[str, Any]) -> dict[str, Any]:
    """``CommandV2Info``: name and template, and what else the command declares."""
    view: dict[str, Any] = {k: wire[k] for k in ("name", "template", "description", "agent", "subtask") if k in wire}
    if model := _model_ref(wire.get("model")):
        view["model"] = model
    return view


def provider(entry: dict[str, Any]) -> dict[str, Any]:
    """``ProviderV2Info`` from a catalog entry (credentials are never listed)."""
    url = next((m["api"]["url"] for m in entry["models"].values() if m["api"].get("url")), "")
    api: dict[str, Any] = {"type": "aisdk", "package": "@ai-sdk/openai-compatible"}
    if url:
        api["url"] = url
    return {"id": entry["id"], "name": entry["name"], "api": api, "request": {"headers": {}, "body": {}}}


def models(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``ModelV2Info`` for each model of a catalog entry."""
    result = []
    for model in entry["models"].values():
        api: dict[str, Any] = {"id": model["api"]["id"], "type": "aisdk", "package": "@ai-sdk/openai-compatible"}
        if model["api"].get("url"):
            api["url"] = model["api"]["url"]
        cost = model["cost"]
        result.append(
            {
                "id": model["id"],
                "providerID": model["providerID"],
                "name": model["name"],
                "api": api,
                "capabilities": {"tools": True, "input": ["text"], "output": ["text"]},
                "request": {"headers": {}, "body": {}},
                "variants": [{"id": name, "headers": {}, "body": spec} for name, spec in model["variants"].items()],
                "time": {"released": 0},
                "cost": [{"input": cost["input"], "output": cost["output"], "cache": dict(cost["cache"])}],
                "status": model["status"],
                "enabled": True,
                "limit": dict(model["limit"]),
            }
        )
    return result


def references(raw: Any, directory: str) -> list[dict[str, Any]]:
    """``ReferenceInfo`` for each ``references`` entry of opencode.json: a local ``path`` or a
    git ``repository`` (a string is shorthand for either, as in OpenCode); a local path is resolved
    against the project directory."""
    result = []
    for name, spec in (raw or {}).items() if isinstance(raw, dict) else ():
        if isinstance(spec, str):
            local = spec.startswith((".", "/", "~"))
            spec = {"path": spec} if local else {"repository": spec}
        if not isinstance(spec, dict) or not isinstance(spec.get("path") or spec.get("repository"), str):
            continue
        extra = {k: spec[k] for k in ("description", "hidden") if k in spec}
        if isinstance(spec.get("path"), str):
            source = {"type": "local", "path": spec["path"], **extra}
        else:
            source = {"type": "git", "repository": spec["repository"], **extra}
            source |= {"branch": spec["branch"]} if isinstance(spec.get("branch"), str) else {}
        path = os.path.normpath(os.path.join(directory, os.path.expanduser(spec["path"]))) if "path" in spec else None
        result.append({"name": name, "path": path or spec["repository"], **extra, "source": source})
    return result
