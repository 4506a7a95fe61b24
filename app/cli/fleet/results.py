"""What the fleet tools answer, as typed dictionaries: the SDK publishes them as the tools'
output schemas (and checks each result against its own), so a calling agent knows every field."""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict


class ToolState(TypedDict):
    """A tool call of the model: its name and state (pending, running, completed, error)."""

    tool: str
    status: str
    title: NotRequired[str]
    error: NotRequired[str]


class Said(TypedDict):
    """What a message or a turn said: its text parts joined, and its tool calls."""

    text: str
    tools: list[ToolState]


class ReplySoFar(Said):
    error: NotRequired[str]  # the turn failed
    waitingFor: NotRequired[list[str]]  # permissions asked that nobody answered yet


class OnSession(TypedDict):
    node: str
    sessionID: str


class Created(OnSession):
    directory: str | None


class Reply(OnSession, ReplySoFar):
    timedOut: bool
    note: NotRequired[str]  # when timed out: what the turn is doing, what to call next


class Status(OnSession):
    status: Literal["idle", "busy"]
    detail: NotRequired[str]  # the server's state when it is neither (e.g. "retry")


class Interrupted(Status):
    interrupted: bool


class Reset(OnSession):
    previousSessionID: str


class Message(Said):
    id: str
    role: str
    error: NotRequired[str]


class Transcript(OnSession):
    messages: list[Message]
