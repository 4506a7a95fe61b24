"""What the fleet tools say about a session's messages, compactly (role, text, tool names and
states): another agent reads it, so reasoning, step markers and tool output are left out.

``Turn`` follows one prompt on the event stream and keeps the assistant parts it has seen, so a
reply can be given when the session goes idle, or partially when the wait runs out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.cli.common import error_text, event_session
from app.cli.fleet.results import Message, ReplySoFar, Said, ToolState


def _tool(part: dict[str, Any]) -> ToolState:
    state = part.get("state") or {}
    tool: ToolState = {"tool": str(part.get("tool", "?")), "status": str(state.get("status", "pending"))}
    if state.get("title"):
        tool["title"] = str(state["title"])
    if state.get("status") == "error" and state.get("error"):
        tool["error"] = str(state["error"])
    return tool


def compact_parts(parts: Iterable[dict[str, Any]]) -> Said:
    """``{text, tools}`` of a message's parts: the text parts joined (synthetic and ignored ones
    left out, they are not the model's words), and each tool call's name and state."""
    texts: list[str] = []
    tools: list[ToolState] = []
    for part in parts:
        if part.get("type") == "text" and not part.get("synthetic") and not part.get("ignored"):
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "tool":
            tools.append(_tool(part))
    return {"text": "\n".join(text for text in texts if text), "tools": tools}


def compact_message(message: dict[str, Any]) -> Message:
    """One ``{info, parts}`` entry of ``/session/:id/message`` as ``{id, role, text, tools}`` (and
    ``error`` when the message ended in one)."""
    info = message.get("info") or {}
    said = compact_parts(message.get("parts", []))
    entry: Message = {
        "id": str(info.get("id")),
        "role": str(info.get("role")),
        "text": said["text"],
        "tools": said["tools"],
    }
    if isinstance(info.get("error"), dict):
        entry["error"] = error_text(info["error"])
    return entry


class Turn:
    """One prompt's progress on one session, from that directory's ``/event`` stream.

    Invariants: only events of ``session_id`` count; the turn is over at a ``session.idle`` that
    follows a busy status (an idle left over from before the prompt does not end it); parts are
    kept in the order they first appeared, with text deltas applied until the final part arrives."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.busy_seen = False
        self.roles: dict[str, str] = {}  # message id -> role
        self.parts: dict[str, dict[str, Any]] = {}  # part id -> latest known part
        self.errors: list[str] = []
        self.asking: dict[str, str] = {}  # permission request id -> what it asks, until answered

    def take(self, event: dict[str, Any]) -> bool:
        """Apply one event; True once the turn is over."""
        kind, props = event.get("type", ""), event.get("properties") or {}
        if event_session(props) != self.session_id:
            return False
        if kind == "message.updated" and isinstance(props.get("info"), dict):
            info = props["info"]
            self.roles[info.get("id", "")] = info.get("role", "")
        elif kind == "message.part.updated" and isinstance(props.get("part"), dict):
            part = props["part"]
            self.parts[part.get("id", "")] = part
        elif kind == "message.part.delta" and props.get("field", "text") == "text":
            part = self.parts.setdefault(
                props.get("partID", ""), {"type": "text", "messageID": props.get("messageID"), "text": ""}
            )
            part["text"] = str(part.get("text", "")) + str(props.get("delta", ""))
        elif kind == "session.status":
            self.busy_seen = self.busy_seen or (props.get("status") or {}).get("type") in ("busy", "retry")
        elif kind == "permission.asked":
            patterns = props.get("patterns") or []
            self.asking[str(props.get("id"))] = f"{props.get('permission', '?')} ({', '.join(map(str, patterns))})"
        elif kind == "permission.replied":
            self.asking.pop(str(props.get("requestID")), None)
        elif kind == "session.error" and isinstance(props.get("error"), dict):
            message = error_text(props["error"])
            if message not in self.errors:
                self.errors.append(message)
        return kind == "session.idle" and self.busy_seen

    def reply(self) -> ReplySoFar:
        """The assistant's parts seen so far as ``{text, tools}`` (``error`` if the turn failed,
        ``waitingFor`` the permissions it asked that nobody answered yet)."""
        assistant = [part for part in self.parts.values() if self.roles.get(part.get("messageID", "")) == "assistant"]
        said = compact_parts(assistant)
        reply: ReplySoFar = {"text": said["text"], "tools": said["tools"]}
        if self.errors:
            reply["error"] = "; ".join(self.errors)
        if self.asking:
            reply["waitingFor"] = [f"permission {asked}" for asked in self.asking.values()]
        return reply
