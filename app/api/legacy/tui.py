"""Remote control of attached TUIs (``/tui/*``) and ``/log``, as OpenCode's server offers them:
each control route publishes a live event (``tui.prompt.append``, ``tui.command.execute``,
``tui.toast.show``, ``tui.session.select``) that every TUI attached to the directory acts on."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import DirectoryDep, RuntimeDep, SessionID, SessionsDep
from app.api.responses import JSONBody

router = APIRouter(tags=["tui"])
log = logging.getLogger("opensession.client")

# ``/tui/execute-command`` takes the TUI's keybind names; these are the ones OpenCode forwards.
COMMAND_ALIASES = {
    "session_new": "session.new",
    "session_share": "session.share",
    "session_interrupt": "session.interrupt",
    "session_compact": "session.compact",
    "messages_page_up": "session.page.up",
    "messages_page_down": "session.page.down",
    "messages_line_up": "session.line.up",
    "messages_line_down": "session.line.down",
    "messages_half_page_up": "session.half.page.up",
    "messages_half_page_down": "session.half.page.down",
    "messages_first": "session.first",
    "messages_last": "session.last",
    "agent_cycle": "agent.cycle",
}
# Routes that open a dialog or act on the prompt: the command each one sends.
DIALOG_COMMANDS = {
    "/tui/open-help": "help.show",
    "/tui/open-sessions": "session.list",
    "/tui/open-themes": "session.list",  # as OpenCode does
    "/tui/open-models": "model.list",
    "/tui/submit-prompt": "prompt.submit",
    "/tui/clear-prompt": "prompt.clear",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptText(_Strict):
    text: str


class Command(_Strict):
    command: str


class Toast(_Strict):
    title: str | None = None
    message: str
    variant: Literal["info", "success", "warning", "error"]
    duration: int | None = Field(default=None, gt=0)


class SessionSelect(_Strict):
    sessionID: SessionID


class PublishPromptAppend(_Strict):
    type: Literal["tui.prompt.append"]
    properties: PromptText


class PublishCommand(_Strict):
    type: Literal["tui.command.execute"]
    properties: Command


class PublishToast(_Strict):
    type: Literal["tui.toast.show"]
    properties: Toast


class PublishSessionSelect(_Strict):
    type: Literal["tui.session.select"]
    properties: SessionSelect


Publishable = Annotated[
    PublishPromptAppend | PublishCommand | PublishToast | PublishSessionSelect, Field(discriminator="type")
]


class LogEntry(_Strict):
    service: str
    level: Literal["debug", "info", "error", "warn"]
    message: str
    extra: dict[str, Any] | None = None


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


@router.post("/log", operation_id="app.log", tags=["control"], summary="Write a client's entry to the server log")
async def write_log(entry: LogEntry) -> Response:
    log.log(_LEVELS[entry.level], "[%s] %s", entry.service, entry.message, extra={"client": entry.extra or {}})
    return JSONBody(True)


@router.post("/tui/append-prompt", operation_id="tui.appendPrompt", summary="Append text to the TUI's prompt")
async def append_prompt(runtime: RuntimeDep, directory: DirectoryDep, body: PromptText) -> Response:
    runtime.publish_tui_event("tui.prompt.append", body.model_dump(), directory)
    return JSONBody(True)


def _dialog(command: str) -> Any:
    async def route(runtime: RuntimeDep, directory: DirectoryDep) -> Response:
        runtime.publish_tui_event("tui.command.execute", {"command": command}, directory)
        return JSONBody(True)

    return route


for _path, _command in DIALOG_COMMANDS.items():
    _name = _path.rsplit("/", 1)[1]
    router.add_api_route(
        _path,
        _dialog(_command),
        methods=["POST"],
        operation_id="tui." + _name.split("-")[0] + "".join(w.title() for w in _name.split("-")[1:]),
        summary=f"Send the TUI the {_command} command",
    )


@router.post("/tui/execute-command", operation_id="tui.executeCommand", summary="Run a TUI command by keybind name")
async def execute_command(runtime: RuntimeDep, directory: DirectoryDep, body: Command) -> Response:
    command = COMMAND_ALIASES.get(body.command)
    runtime.publish_tui_event("tui.command.execute", {"command": command} if command else {}, directory)
    return JSONBody(True)


@router.post("/tui/show-toast", operation_id="tui.showToast", summary="Show a toast in the TUI")
async def show_toast(runtime: RuntimeDep, directory: DirectoryDep, body: Toast) -> Response:
    runtime.publish_tui_event("tui.toast.show", body.model_dump(exclude_none=True), directory)
    return JSONBody(True)


@router.post("/tui/select-session", operation_id="tui.selectSession", summary="Open a session in the TUI")
async def select_session(
    runtime: RuntimeDep, sessions: SessionsDep, directory: DirectoryDep, body: SessionSelect
) -> Response:
    await sessions.get(body.sessionID)  # 404 for an unknown session
    runtime.publish_tui_event("tui.session.select", body.model_dump(), directory)
    return JSONBody(True)


@router.post("/tui/publish", operation_id="tui.publish", summary="Publish a TUI event")
async def publish(
    runtime: RuntimeDep, sessions: SessionsDep, directory: DirectoryDep, body: Annotated[Publishable, Body()]
) -> Response:
    if isinstance(body, PublishSessionSelect):
        await sessions.get(body.properties.sessionID)
    runtime.publish_tui_event(body.type, body.properties.model_dump(exclude_none=True), directory)
    return JSONBody(True)
