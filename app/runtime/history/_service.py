"""The message history of a session, as one service: the only way routes reach messages.

Reads are indexed range scans (cost follows the page, not the session's length). Writes are
durable events whose projections change the rows, in one transaction each, so an error leaves no
partial effect. Message order: ``by_seq`` is the order messages entered the session (what the
model sees and V2 lists); otherwise id order (what legacy clients page through).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EncodedEvent, EventLog, Transaction
from app.jsonutil import dumps, loads
from app.runtime.errors import InvalidInput, MessageNotFound
from app.runtime.sessions import (
    OPEN_REPLY_HINT,
    OPEN_TOOL_HINTS,
    DrainCoordinator,
    SessionService,
    closed_part,
    closed_reply,
    open_reply,
    zero_tokens,
)
from app.store import inputs
from app.store.projectors import message_projection, part_projection
from app.store.queries import Queries, RawMessage, message_ids_from_seq, message_seq, part_ids_from
from app.wire import Message, MessageWithParts, Part, Session

COPY_BATCH = 500  # messages per batch sent ahead while copying (fork)
COPIED_OPEN = {"name": "MessageAbortedError", "data": {"message": "Aborted: copied before the reply finished"}}
_PARENT = re.compile(r'"parentID":"(msg_[0-9A-Za-z]+)"')
_ID = re.compile(r'"id":"(prt_[0-9A-Za-z]+)"')
_FORK_NUMBER = re.compile(r"(.+) \(fork #(\d+)\)")


def forked_title(title: str) -> str:
    """A fork's title as OpenCode names it, from its source's title alone: ``T`` gives
    ``T (fork #1)`` and ``T (fork #1)`` gives ``T (fork #2)``; two forks of one session share a
    title."""
    numbered = _FORK_NUMBER.fullmatch(title)
    if numbered is None:
        return f"{title} (fork #1)"
    return f"{numbered.group(1)} (fork #{int(numbered.group(2)) + 1})"


def _swap(text: str, pairs: list[tuple[str, str]]) -> str:
    """Replace ids in stored JSON text with their copies' (ids are unique random tokens)."""
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _message_text(session_id: str, message_id: str, role: str, created: int, info: str) -> EncodedEvent:
    """A ``message.updated`` event of a message whose info is JSON text, with its projection."""
    row = message_projection(message_id, session_id, role, created, info)
    return "message.updated", f'{{"sessionID":"{session_id}","info":{info}}}', [row]


def _part_text(session_id: str, message_id: str, part_id: str, part: str, time: int) -> EncodedEvent:
    """A ``message.part.updated`` event of a part that is JSON text, with its projection."""
    row = part_projection(part_id, message_id, session_id, part)
    return "message.part.updated", f'{{"sessionID":"{session_id}","part":{part},"time":{time}}}', [row]


class History:
    def __init__(
        self, log: EventLog, queries: Queries, sessions: SessionService, coordinator: DrainCoordinator
    ) -> None:
        self.log = log
        self.queries = queries
        self.sessions = sessions
        self.coordinator = coordinator

    # -- reads -------------------------------------------------------------------------------

    async def get_messages(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        offset: int = 0,
        by_seq: bool = False,
    ) -> list[MessageWithParts]:
        """Oldest first. ``limit`` takes the newest messages (older than ``before``, skipping the
        ``offset`` newest)."""
        await self.sessions.get(session_id)
        if limit is None and before is None and not offset:
            return await self.queries.messages(session_id, by_seq=by_seq)
        page = await self.queries.message_page(
            session_id, descending=True, bound=before, limit=limit, by_seq=by_seq, offset=offset
        )
        return [m.decode() for m in reversed(page)]

    async def raw_messages(
        self, session_id: str, *, limit: int | None = None, before: str | None = None
    ) -> list[RawMessage]:
        """Like ``get_messages`` (id order) but as stored JSON, for responses that splice it."""
        await self.sessions.get(session_id)
        return await self.queries.raw_messages(session_id, limit=limit, before=before)

    async def page(self, session_id: str, *, descending: bool, after: str | None, limit: int) -> list[RawMessage]:
        """Messages in entry order, strictly past message ``after`` (V2 cursor paging)."""
        await self.sessions.get(session_id)
        return await self.queries.message_page(session_id, descending=descending, bound=after, limit=limit, by_seq=True)

    async def get_message(self, session_id: str, message_id: str) -> MessageWithParts:
        await self.sessions.get(session_id)
        found = await self.queries.message(session_id, message_id)
        if found is None:
            raise MessageNotFound(session_id, message_id)
        return found

    async def get_message_count(self, session_id: str) -> int:
        await self.sessions.get(session_id)
        return await self.queries.message_count(session_id)

    # -- writes ------------------------------------------------------------------------------

    async def append_message(
        self, tx: Transaction, session: Session, info: Message, parts: list[dict[str, Any]]
    ) -> None:
        """Add a message and its parts (ids assigned where missing) inside ``tx``."""
        session_id, directory = session["id"], session["directory"]
        await tx.emit(
            "message.updated", {"sessionID": session_id, "info": info}, session_id=session_id, directory=directory
        )
        for part in parts:
            row = {**part, "id": part.get("id") or ids.part_id(), "sessionID": session_id, "messageID": info["id"]}
            await tx.emit(
                "message.part.updated",
                {"sessionID": session_id, "part": row, "time": now_ms()},
                session_id=session_id,
                directory=directory,
            )

    async def copy_messages(self, tx: Transaction, source_id: str, target: Session, up_to: str | None) -> int:
        """Copy the messages of ``source_id`` whose ids sort strictly before ``up_to`` (all when
        None) into ``target`` with new ids, keeping each reply linked to its copied prompt. As in
        OpenCode the boundary is an id, not a position: it need not be a message of the session.

        A reply still streaming in the source is copied as far as it got and closed in the copy
        (``closed_reply``), as an abort leaves one: no turn of the copy will ever finish it."""
        originals = await self.queries.copy_source(source_id, up_to)
        # Stored JSON is copied as text with its ids swapped (ids are unique random tokens), so a
        # long session is copied without decoding and re-encoding every message and part.
        renamed: dict[str, str] = {}
        session_id = target["id"]
        at = now_ms()
        message_ids = iter(ids.ascending("message", len(originals)))
        part_ids = iter(ids.ascending("part", sum(len(original[4]) for original in originals)))
        run: list[EncodedEvent] = []
        for index, (old_id, role, created, info, part_texts) in enumerate(originals, 1):
            if index % COPY_BATCH == 0:
                await tx.emit_encoded_run(session_id, target["directory"], run)
                run = []
                await tx.scope.send_ahead()  # the database writes this batch while the next is built
            new_id = renamed[old_id] = next(message_ids)
            common = [(old_id, new_id), (source_id, session_id)]
            parent = _PARENT.search(info)
            if parent and parent.group(1) in renamed:
                common.append((parent.group(1), renamed[parent.group(1)]))
            info = _swap(info, common)
            still_open = role == "assistant" and OPEN_REPLY_HINT not in info and open_reply(decoded := loads(info))
            if still_open:
                info = dumps(closed_reply(decoded, COPIED_OPEN, at))
            run.append(_message_text(session_id, new_id, role, created, info))
            for text in part_texts:
                part_id = next(part_ids)
                own = _ID.search(text)
                part = _swap(text, ([(own.group(1), part_id)] if own else []) + common[:2])
                if still_open or any(hint in part for hint in OPEN_TOOL_HINTS):
                    closed = closed_part(loads(part), at)
                    part = part if closed is None else dumps(closed)
                run.append(_part_text(session_id, new_id, part_id, part, created))
        await tx.emit_encoded_run(session_id, target["directory"], run)
        return len(originals)

    async def append_encoded(
        self, tx: Transaction, session: Session, info: dict[str, Any], parts: list[dict[str, Any]]
    ) -> None:
        """``append_message`` for bulk writes (an import): the events keep their JSON text only,
        not the decoded payload as well, so a transaction of thousands of messages holds about
        the size of their text until it commits. Every part has its id."""
        session_id, message_id, at = session["id"], info["id"], now_ms()
        run = [_message_text(session_id, message_id, info["role"], info["time"]["created"], dumps(info))]
        for part in parts:
            row = part | {"sessionID": session_id, "messageID": message_id}
            run.append(_part_text(session_id, message_id, part["id"], dumps(row), at))
        await tx.emit_encoded_run(session_id, session["directory"], run)

    async def fork(self, source_id: str, up_to: str | None, *, request_key: str | None = None) -> Session:
        """A new session holding copies of the messages before ``up_to`` (all when None), titled
        by ``forked_title``, with no parent: a fork is a sibling, not a child. With
        ``request_key``, the fork an earlier copy of the request made, if any."""
        source = await self.sessions.get(source_id)
        created = now_ms()
        kept = ("slug", "projectID", "directory", "path", "version", "workspaceID", "agent", "model", "permission")
        info: Session = {
            **{k: v for k, v in source.items() if k in kept},  # type: ignore[typeddict-item]
            "id": ids.session_id(),
            "title": forked_title(source["title"]),
            "cost": 0,
            "tokens": zero_tokens(),
            "time": {"created": created, "updated": created},
        }
        async with self.log.transaction() as tx:
            request = f"fork {source_id} {up_to or ''}".rstrip()
            if request_key is not None and (earlier := await self.sessions.keyed(tx, request_key, request, info["id"])):
                return earlier
            await self.sessions.emit_created(tx, info)
            await self.copy_messages(tx, source_id, info, up_to)
        return info

    async def truncate_messages(
        self, tx: Transaction, session: Session, up_to: str, part_id: str | None = None
    ) -> list[str]:
        """Remove ``up_to`` (or, with ``part_id``, that part and the later parts of it) and every
        message that entered the session after it; returns the removed message ids."""
        session_id, directory = session["id"], session["directory"]
        seq = await message_seq(tx.scope, session_id, up_to)
        if seq is None:
            raise MessageNotFound(session_id, up_to)
        later = await message_ids_from_seq(tx.scope, session_id, seq)
        if part_id is not None:
            for doomed_part in await part_ids_from(tx.scope, up_to, part_id):
                props = {"sessionID": session_id, "messageID": up_to, "partID": doomed_part}
                await tx.emit("message.part.removed", props, session_id=session_id, directory=directory)
            later.remove(up_to)
        for message_id in later:
            await tx.emit(
                "message.removed",
                {"sessionID": session_id, "messageID": message_id},
                session_id=session_id,
                directory=directory,
            )
            inputs.complete(tx.scope, message_id)
        return later

    @asynccontextmanager
    async def still(self, session_id: str) -> AsyncIterator[Session]:
        """The session, held still for an operation that moves its history: refused with
        SessionBusy while a turn runs, and no turn starts until the operation is done (history
        must not move under a running turn)."""
        async with self.coordinator.hold(session_id):
            yield await self.sessions.get(session_id)

    async def delete_message(self, session_id: str, message_id: str) -> None:
        async with self.still(session_id) as session:
            await self.get_message(session_id, message_id)
            async with self.log.transaction() as tx:
                await tx.emit(
                    "message.removed",
                    {"sessionID": session_id, "messageID": message_id},
                    session_id=session_id,
                    directory=session["directory"],
                )
                inputs.complete(tx.scope, message_id)

    async def _part(self, session_id: str, message_id: str, part_id: str) -> Part:
        message = await self.get_message(session_id, message_id)
        for part in message["parts"]:
            if part["id"] == part_id:
                return part
        raise MessageNotFound(session_id, message_id, part_id=part_id)

    async def delete_part(self, session_id: str, message_id: str, part_id: str) -> None:
        async with self.still(session_id) as session:
            await self._part(session_id, message_id, part_id)
            async with self.log.transaction() as tx:
                props = {"sessionID": session_id, "messageID": message_id, "partID": part_id}
                await tx.emit("message.part.removed", props, session_id=session_id, directory=session["directory"])

    async def update_part(self, session_id: str, message_id: str, part: dict[str, Any]) -> dict[str, Any]:
        """Replace a part (the whole part, as OpenCode's PATCH takes it); ids must match the path."""
        async with self.still(session_id) as session:
            await self._part(session_id, message_id, part["id"])
            if part.get("sessionID", session_id) != session_id or part.get("messageID", message_id) != message_id:
                raise InvalidInput("part.sessionID and part.messageID must match the path")
            stored = {**part, "sessionID": session_id, "messageID": message_id}
            async with self.log.transaction() as tx:
                await tx.emit(
                    "message.part.updated",
                    {"sessionID": session_id, "part": stored, "time": now_ms()},
                    session_id=session_id,
                    directory=session["directory"],
                )
        return stored
