"""Import a session exported as OpenCode's ``opencode export`` JSON (``{info, messages: [{info,
parts}]}``), by opensession or by OpenCode itself.

The whole file is checked before anything is written, and the session, its messages and parts are
written in one transaction of ordinary events (``session.created``, ``message.updated``,
``message.part.updated``), so the projections, the event streams and a crash all see either the
whole session or none of it. Ids are kept when they are free; when any message (or part) id is
already taken, every message (or part) gets a new one, in file order, so the order is kept and
every reference (``messageID``, ``sessionID``, ``parentID``, a pending revert) follows. A session id
that is already taken is refused: importing the same file twice never makes a duplicate.

A file is not trusted beyond what it describes: a pending revert keeps its point but not the
tree it names (that tree belongs to the machine the file came from, so unreverting an imported
session restores no files), and times in the future become now (a file cannot make its session
the directory's latest for good, which ``opensession run -c`` would continue).

Memory: the file is read twice, a message at a time (app/runtime/history/_export_file.py), once to
check it and once to write it; what the transaction holds until it commits is the events' JSON
text (``History.append_encoded``), not the file decoded into Python objects (about ten times its
size).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import IO, Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction
from app.jsonutil import UnencodableValue, dumpb
from app.runtime.errors import Conflict, InvalidInput
from app.runtime.history._export_file import Elements, ExportSyntax, members
from app.runtime.history._service import COPIED_OPEN, COPY_BATCH, History
from app.runtime.sessions import SessionService, closed_part, closed_reply, open_reply
from app.store.database import Reader
from app.store.queries import message_id_taken, part_id_taken, session_exists
from app.wire import Session

SessionID = Annotated[str, StringConstraints(pattern=r"^ses_[0-9A-Za-z]{1,64}$")]
MessageID = Annotated[str, StringConstraints(pattern=r"^msg_[0-9A-Za-z]{1,64}$")]
PartID = Annotated[str, StringConstraints(pattern=r"^prt_[0-9A-Za-z]{1,64}$")]


class _Loose(BaseModel):
    """Only the fields the import relies on are checked; everything else is kept as it is."""

    model_config = ConfigDict(extra="allow")


class _SessionTime(_Loose):
    created: int
    updated: int


class _SessionInfo(_Loose):
    id: SessionID
    title: str
    time: _SessionTime


class _MessageTime(_Loose):
    created: int


class _MessageInfo(_Loose):
    id: MessageID
    role: Literal["user", "assistant"]
    time: _MessageTime


class _Part(_Loose):
    id: PartID
    type: str = Field(min_length=1)


class _Message(_Loose):
    info: _MessageInfo
    parts: list[_Part]


def _describe(error: ValidationError, at: tuple[str | int, ...]) -> str:
    first = error.errors()[0]
    return f"not a session export: {'.'.join(str(step) for step in (*at, *first['loc']))}: {first['msg']}"


def _valid(model: type[_Loose], value: Any, at: tuple[str | int, ...]) -> Any:
    """``value`` checked as ``model`` and as something the server can store."""
    try:
        checked = model.model_validate(value)
        dumpb(value)
    except ValidationError as exc:
        raise InvalidInput(_describe(exc, at)) from None
    except UnencodableValue as exc:
        raise InvalidInput(f"not a session export: {'.'.join(map(str, at))}: {exc}") from None
    return checked


@dataclass(frozen=True, slots=True)
class Checked:
    """What checking an export found: its session's info, and every message and part id in
    file order (the import renames them all when one is taken)."""

    info: dict[str, Any]
    messages: list[str]
    parts: list[str]


def check_export(file: IO[bytes]) -> Checked:
    """Raise InvalidInput naming the first problem of ``file`` as a session export, reading it
    from the start a message at a time."""
    info: dict[str, Any] | None = None
    names: set[str] = set()
    messages: dict[str, None] = {}  # ordered sets
    parts: dict[str, None] = {}
    try:
        for name, value in members(file):
            if name in names:
                raise InvalidInput(f"not a session export: {name} appears twice")
            names.add(name)
            if name == "info":
                _valid(_SessionInfo, value, ("info",))
                info = value
            elif name == "messages" and not isinstance(value, Elements):
                raise InvalidInput("not a session export: messages: Input should be a valid list")
            elif name == "messages":
                for index, data in enumerate(value):
                    message = _valid(_Message, data, ("messages", index))
                    if message.info.id in messages:
                        raise InvalidInput(f"not a session export: message {message.info.id} appears twice")
                    messages[message.info.id] = None
                    for part in message.parts:
                        owner = (part.model_extra or {}).get("messageID", message.info.id)
                        if owner != message.info.id:
                            raise InvalidInput(
                                f"not a session export: part {part.id} of messages.{index} names message {owner}"
                            )
                        if part.id in parts:
                            raise InvalidInput(f"not a session export: part {part.id} appears twice")
                        parts[part.id] = None
    except ExportSyntax as exc:
        raise InvalidInput(str(exc)) from None
    for required in ("info", "messages"):
        if required not in names:
            raise InvalidInput(f"not a session export: {required}: Field required")
    assert info is not None
    return Checked(info, list(messages), list(parts))


def _messages(file: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The messages of a checked export, from the start of ``file``, one at a time."""
    file.seek(0)
    for name, value in members(file):
        if name == "messages":
            yield from value


class Importer:
    def __init__(self, log: EventLog, sessions: SessionService, history: History) -> None:
        self.log = log
        self.sessions = sessions
        self.history = history

    async def import_session(self, file: IO[bytes], directory: str) -> Session:
        """Write the session exported in ``file`` into ``directory`` (as OpenCode's import, the
        importing project owns it) and return its info. A reply the file holds open (exported
        while a turn ran) is closed as a fork closes one: nothing here will ever finish it."""
        checked = await asyncio.to_thread(check_export, file)  # parsing megabytes: off the loop
        source = checked.info
        kept = {k: v for k, v in source.items() if k not in ("share", "parentID", "revert")}
        now = now_ms()
        place = await self.sessions.place(directory)
        here = {
            "directory": directory,
            "projectID": place.project_id,
            "path": "",
            "time": {**source["time"], **{k: min(source["time"][k], now) for k in ("created", "updated")}},
        }
        info = cast(Session, kept | here)  # a session info: check_export checked its keys
        async with self.log.transaction() as tx:
            if await session_exists(tx.scope, info["id"]):
                raise Conflict(f"Session {info['id']} already exists (imported before?): nothing imported", info["id"])
            parent = source.get("parentID")
            if isinstance(parent, str) and await session_exists(tx.scope, parent):
                info["parentID"] = parent  # a child keeps its parent only when the parent is here
            messages = await self._renamed(tx, checked.messages, message_id_taken, "message")
            parts = await self._renamed(tx, checked.parts, part_id_taken, "part")
            revert = source.get("revert")
            if isinstance(revert, dict) and revert.get("messageID") in messages:
                info["revert"] = {"messageID": messages[revert["messageID"]]}
                if revert.get("partID") in parts:
                    info["revert"]["partID"] = parts[revert["partID"]]
            self.sessions.record_place(tx, directory, place)
            await self.sessions.emit_created(tx, info)
            for index, message in enumerate(_messages(file), 1):
                if index % COPY_BATCH == 0:
                    await tx.scope.send_ahead()  # the database writes this batch while the next is read
                message_info = message["info"] | {"id": messages[message["info"]["id"]], "sessionID": info["id"]}
                if message_info.get("parentID") in messages:
                    message_info["parentID"] = messages[message_info["parentID"]]
                if open_reply(message_info):
                    message_info = closed_reply(message_info, COPIED_OPEN, now)
                new_parts = [part | {"id": parts[part["id"]]} for part in message["parts"]]
                new_parts = [closed_part(part, now) or part for part in new_parts]
                await self.history.append_encoded(tx, info, message_info, new_parts)
        return info

    @staticmethod
    async def _renamed(
        tx: Transaction, old: list[str], taken: Callable[[Reader, str], Awaitable[bool]], kind: str
    ) -> dict[str, str]:
        """Old id -> id to store: the same ids when all are free, otherwise new ones for all."""
        for item in old:
            if await taken(tx.scope, item):
                return {item: ids.new_id(kind) for item in old}
        return {item: item for item in old}
