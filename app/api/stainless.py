"""OpenCode's 0.x API as its Stainless-generated SDKs speak it (``opencode-ai`` on PyPI, 0.1.0a36).

Those SDKs still call routes and expect shapes that OpenCode's server has since changed: ``POST
/session/:id/message`` answering the assistant message's info alone (today: ``{info, parts}``),
assistant infos with a ``system`` list, ``GET /file?path=<file>`` reading a file (today it lists
a directory), models with flat ``attachment``/``tool_call`` fields, and an event union with no
deltas, statuses or reasoning. Serving both on one route needs a choice per request, and the
request says which client it is: every Stainless SDK sends ``X-Stainless-Lang`` (the current
JS SDK and the TUI never do). So this module is a translator beside the legacy and V2 ones:
routes stay as they are for current clients and pass their answers through here for old ones.

Everything an old client receives validates against its own models: whatever has no 0.x
equivalent (a reasoning part, a delta, a status event) is left out rather than sent in a shape
the SDK cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import HTTPConnection

from app.jsonutil import dumpb, loads

HEADER = "x-stainless-lang"

# Part and event types the 0.x SDK knows (its ``Part`` and ``EventListResponse`` unions).
_PART_TYPES = {"text", "file", "tool", "step-start", "step-finish", "snapshot", "patch"}
_MESSAGE_ERRORS = {"ProviderAuthError", "UnknownError", "MessageOutputLengthError", "MessageAbortedError"}
_EVENT_TYPES = {
    "installation.updated",
    "lsp.client.diagnostics",
    "message.updated",
    "message.removed",
    "message.part.updated",
    "message.part.removed",
    "storage.write",
    "permission.updated",
    "file.edited",
    "session.updated",
    "session.deleted",
    "session.idle",
    "session.error",
    "server.connected",
    "file.watcher.updated",
    "ide.installed",
}


def speaks(request: HTTPConnection) -> bool:
    """Whether the client is a Stainless-generated SDK (so wants 0.x shapes)."""
    return HEADER in request.headers


def error(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A named error the 0.x union has; any other becomes ``UnknownError`` with its message."""
    if not value or value.get("name") in _MESSAGE_ERRORS:
        return value
    data = value.get("data") or {}
    message = data.get("message") if isinstance(data, dict) else None
    return {"name": "UnknownError", "data": {"message": str(message or value.get("name", "error"))}}


def message_info(info: Mapping[str, Any]) -> dict[str, Any]:
    if info.get("role") != "assistant":
        return dict(info)
    result = {**info, "system": info.get("system") or []}
    result.setdefault("mode", info.get("agent", "build"))
    if "error" in result:
        result["error"] = error(result["error"])
        if result["error"] is None:
            del result["error"]
    return result


def part(value: dict[str, Any]) -> dict[str, Any] | None:
    return value if value.get("type") in _PART_TYPES else None


def message(value: dict[str, Any]) -> dict[str, Any]:
    parts = [p for p in (part(p) for p in value.get("parts", [])) if p is not None]
    return {"info": message_info(value["info"]), "parts": parts}


def messages_json(raw: bytes) -> bytes:
    return dumpb([message(m) for m in loads(raw)])


def model(entry: dict[str, Any]) -> dict[str, Any]:
    """A model with the 0.x flat fields added (``attachment``, ``tool_call``, ``cost.cache_read``)."""
    capabilities = entry.get("capabilities") or {}
    cost = entry.get("cost") or {}
    cache = cost.get("cache") or {}
    return {
        **entry,
        "attachment": bool(capabilities.get("attachment", False)),
        "reasoning": bool(capabilities.get("reasoning", False)),
        "temperature": bool(capabilities.get("temperature", True)),
        "tool_call": bool(capabilities.get("toolcall", True)),
        "cost": {**cost, "cache_read": cache.get("read", 0), "cache_write": cache.get("write", 0)},
        "options": entry.get("options") or {},
    }


def providers(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**p, "models": {mid: model(m) for mid, m in p["models"].items()}} for p in listed]


def mode(agent: dict[str, Any]) -> dict[str, Any]:
    """An agent (today's ``Agent`` shape) as a 0.x mode: the tools it denies outright are ``false``."""
    rules = agent.get("permission") or []
    result: dict[str, Any] = {
        "name": agent["name"],
        "tools": {r["permission"]: False for r in rules if r["pattern"] == "*" and r["action"] == "deny"},
    }
    result |= {key: agent[key] for key in ("prompt", "model") if key in agent}
    return result


def event(event_type: str, properties: dict[str, Any]) -> dict[str, Any] | None:
    """An event as the 0.x union has it, or ``None`` when it has no 0.x equivalent."""
    if event_type == "permission.asked":
        return _permission(properties)
    if event_type not in _EVENT_TYPES:
        return None
    if event_type == "message.updated":
        return {"type": event_type, "properties": {**properties, "info": message_info(properties["info"])}}
    if event_type == "message.part.updated":
        return {"type": event_type, "properties": properties} if part(properties["part"]) else None
    if event_type == "session.error":
        return {"type": event_type, "properties": {**properties, "error": error(properties.get("error"))}}
    if event_type == "file.watcher.updated":
        kind = "change" if properties.get("event") == "change" else "rename"
        return {"type": event_type, "properties": {**properties, "event": kind}}
    return {"type": event_type, "properties": properties}


def _permission(request: dict[str, Any]) -> dict[str, Any]:
    """A permission request (today's ``permission.asked``) as 0.x's ``permission.updated``."""
    patterns = request.get("patterns") or []
    title = f"{request.get('permission', 'permission')}: {', '.join(patterns)}" if patterns else ""
    return {
        "type": "permission.updated",
        "properties": {
            **request,
            "title": title or str(request.get("permission", "")),
            "metadata": request.get("metadata") or {},
            "time": {"created": (request.get("time") or {}).get("created", 0)},
        },
    }
