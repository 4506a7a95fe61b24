"""Read side: every query the runtime and the API need, each one an indexed lookup or range
scan whose cost depends on the page asked for, not on how long a session is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.jsonutil import loads
from app.store import sql
from app.store.database import Database, Reader, Row
from app.wire import MessageWithParts, Session


@dataclass(slots=True)
class RawMessage:
    """A message as stored: its info and parts as JSON text, ready to be spliced into a response
    without decoding and re-encoding."""

    id: str
    info: str
    parts: list[str]

    def decode(self) -> MessageWithParts:
        return {"info": loads(self.info), "parts": [loads(p) for p in self.parts]}


# A session's window as read: its latest summary (a ``snapshots`` row; None: none), the messages
# that entered after it (all without one), in entry order, and the ids of those that are prompts
# admitted but not yet promoted into a step.
WindowRows = tuple[Row | None, list[MessageWithParts], set[str]]


@dataclass(frozen=True, slots=True)
class StepWork:
    """What a drain reads before each step: the session as it stands, its inputs admitted and
    not yet answered, in admission order, and, when it has any, the window its step sends the
    model (read before the step writes anything)."""

    session: Session
    inputs: list[InputRow]
    window: WindowRows | None


class _WindowRows:
    """Collects the rows of a window (``clauses._window_rows``), in the read's order."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.summary: Row | None = None
        self.found: dict[str, RawMessage] = {}

    def take(self, kind: int, key: str, data: str, seq: int, tail: str, version: int, created: int) -> None:
        if kind == 0:
            self.found[key] = RawMessage(key, data, [])
        elif kind == 1:
            message = self.found.get(key)
            if message is not None:
                message.parts.append(data)
        else:  # the summary: message id, text, through seq, reason, version, time created
            self.summary = (self.session_id, version, seq, key, tail, data, created)

    def rows(self, waiting: set[str], decoded: DecodedWindows) -> WindowRows:
        """The window, ``waiting`` narrowed to the prompts it holds."""
        return self.summary, decoded.of(self.session_id, self.found), waiting & self.found.keys()


# The most a process keeps decoded (``DecodedWindows``): windows of this many sessions, holding
# this much stored JSON text in all (their decoded form takes several times as much memory).
KEPT_WINDOWS = 256
KEPT_TEXT = 8 * 1024 * 1024


class DecodedWindows:
    """Each recent session's window as last decoded, so the next read of it decodes only the
    messages that changed since (most of a step's window is the same as the last step's).

    Why: a drain reads its session's whole window before every step; decoding it, and freeing
    the previous step's copy, grew with the session's length (bench/step_costs.py). A kept
    message is reused only while its stored JSON is the same text, so the reuse is exact. The
    decoded messages are shared by every read that reuses them: no reader may change one (the
    window's readers build the model's request and the compaction's input from them, and copy
    what they alter). The sessions read least recently go first once ``KEPT_WINDOWS`` or
    ``KEPT_TEXT`` is passed; a window larger than ``KEPT_TEXT`` is not kept."""

    def __init__(self) -> None:
        # session id -> (its window's stored text length, its messages by id), least recent first
        self._kept: dict[str, tuple[int, dict[str, tuple[RawMessage, MessageWithParts]]]] = {}
        self._text = 0  # the stored text length of everything kept

    def of(self, session_id: str, found: dict[str, RawMessage]) -> list[MessageWithParts]:
        size, before = self._kept.pop(session_id, (0, {}))
        self._text -= size
        now: dict[str, tuple[RawMessage, MessageWithParts]] = {}
        size = 0
        for message_id, raw in found.items():
            kept = before.get(message_id)
            if kept is not None and kept[0].info == raw.info and kept[0].parts == raw.parts:
                now[message_id] = kept
            else:
                now[message_id] = (raw, raw.decode())
            size += len(raw.info) + sum(map(len, raw.parts))
        if size <= KEPT_TEXT:
            self._kept[session_id] = (size, now)  # the most recent last (dicts keep insertion order)
            self._text += size
        while len(self._kept) > KEPT_WINDOWS or self._text > KEPT_TEXT:
            self._text -= self._kept.pop(next(iter(self._kept)))[0]
        return [message for _, message in now.values()]


@dataclass(slots=True)
class InputRow:
    id: str
    session_id: str
    prompt: str
    delivery: str
    admitted_seq: int
    promoted_seq: int | None
    completed: bool
    time_created: int
    request_key: str | None = None  # the Idempotency-Key it was admitted under

    def as_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def admitted_record(self) -> dict[str, Any]:
        """The V2 ``SessionInputAdmitted`` shape."""
        record: dict[str, Any] = {
            "admittedSeq": self.admitted_seq,
            "id": self.id,
            "sessionID": self.session_id,
            "prompt": loads(self.prompt)["prompt"],
            "delivery": self.delivery,
            "timeCreated": self.time_created,
        }
        if self.promoted_seq is not None:
            record["promotedSeq"] = self.promoted_seq
        return record


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one assistant message spent, as stored in its info."""

    time_created: int  # ms
    directory: str
    provider: str
    model: str
    input: int
    output: int
    reasoning: int
    cache_read: int
    cache_write: int
    cost: float


def _usage_row(time_created: int, info_text: str, directory: str) -> UsageRow:
    info = loads(info_text)
    tokens = info.get("tokens") or {}
    cache = tokens.get("cache") or {}
    return UsageRow(
        time_created,
        directory,
        str(info.get("providerID", "")),
        str(info.get("modelID", "")),
        int(tokens.get("input") or 0),
        int(tokens.get("output") or 0),
        int(tokens.get("reasoning") or 0),
        int(cache.get("read") or 0),
        int(cache.get("write") or 0),
        float(info.get("cost") or 0),
    )


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Queries:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._windows = DecodedWindows()

    async def session(self, session_id: str) -> Session | None:
        return await session_info(self.db, session_id)

    async def sessions(
        self,
        *,
        directory: str | None,
        roots: bool = False,
        start: int | None = None,
        search: str | None = None,
        limit: int | None = None,
        parent_id: str | None = None,
    ) -> list[Session]:
        statement = sql.session_list(
            directory=directory is not None,
            roots=roots,
            parent=parent_id is not None,
            start=start is not None,
            search=bool(search),
            limit=limit is not None,
        )
        params = {
            "directory": directory,
            "parent_id": parent_id,
            "start": start,
            "search": f"%{_escape_like(search)}%" if search else None,
            "limit": limit,
        }
        rows = await self.db.fetch(statement, {k: v for k, v in params.items() if v is not None})
        return [loads(row[0]) for row in rows]

    async def raw_messages(
        self, session_id: str, *, limit: int | None = None, before: str | None = None, by_seq: bool = False
    ) -> list[RawMessage]:
        """Messages oldest first (by id, or by entry position with ``by_seq``); with ``limit`` the
        newest ``limit`` older than the message ``before``."""
        if limit is None and before is None:
            statement = sql.ALL_MESSAGES_IN_SEQ if by_seq else sql.ALL_MESSAGES
            rows = await self.db.fetch(statement, {"session_id": session_id})
            return await self._with_parts(session_id, rows, whole_session=True)
        page = await self.message_page(session_id, descending=True, bound=before, limit=limit, by_seq=by_seq)
        page.reverse()
        return page

    async def message_page(
        self,
        session_id: str,
        *,
        descending: bool,
        bound: str | None,
        limit: int | None,
        by_seq: bool = False,
        offset: int = 0,
    ) -> list[RawMessage]:
        """Up to ``limit`` messages (newest first when ``descending``) strictly past the message
        ``bound``, skipping ``offset``. One range scan for the messages and one for their parts."""
        params: dict[str, Any] = {"session_id": session_id, "limit": -1 if limit is None else limit}
        if offset:
            params["offset"] = offset
        if bound is not None:
            if by_seq:
                row = await self.db.fetch_one(sql.MESSAGE_SEQ, {"id": bound, "session_id": session_id})
                if row is None:
                    return []
                params["bound"] = row[0]
            else:
                params["bound"] = bound
        statement = sql.messages_page(
            descending=descending, bounded=bound is not None, by_seq=by_seq, offset=bool(offset)
        )
        rows = await self.db.fetch(statement, params)
        return await self._with_parts(session_id, rows, whole_session=False)

    async def _with_parts(self, session_id: str, rows: list[Any], *, whole_session: bool) -> list[RawMessage]:
        if not rows:
            return []
        messages = {row[0]: RawMessage(row[0], row[1], []) for row in rows}
        if whole_session:
            part_rows = await self.db.fetch(sql.PARTS_OF_SESSION, {"session_id": session_id})
        else:
            first, last = min(messages), max(messages)
            part_rows = await self.db.fetch(
                sql.PARTS_IN_RANGE, {"session_id": session_id, "first": first, "last": last}
            )
        for message_id, data in part_rows:
            message = messages.get(message_id)
            if message is not None:
                message.parts.append(data)
        return list(messages.values())

    async def session_page(
        self,
        *,
        descending: bool,
        directory: str | None,
        search: str | None,
        anchor: tuple[int, str] | None,
        limit: int,
        roots: bool = False,
        start: int | None = None,
        before: int | None = None,
    ) -> list[Session]:
        """Keyset page of sessions by time updated (newest first among equal times), strictly
        after ``anchor``; only root sessions with ``roots``, only those updated at or after
        ``start`` and before ``before`` with them."""
        statement = sql.sessions_page(
            descending=descending,
            anchored=anchor is not None,
            directory=directory is not None,
            search=bool(search),
            roots=roots,
            start=start is not None,
            before=before is not None,
        )
        params: dict[str, Any] = {"limit": limit}
        if directory is not None:
            params["directory"] = directory
        if start is not None:
            params["start"] = start
        if before is not None:
            params["before"] = before
        if search:
            params["search"] = f"%{_escape_like(search)}%"
        if anchor is not None:
            params["anchor_time"], params["anchor_id"] = anchor
        return [loads(row[0]) for row in await self.db.fetch(statement, params)]

    async def messages(
        self, session_id: str, *, limit: int | None = None, before: str | None = None, by_seq: bool = False
    ) -> list[MessageWithParts]:
        raw = await self.raw_messages(session_id, limit=limit, before=before, by_seq=by_seq)
        return [m.decode() for m in raw]

    async def session_directories(self) -> list[tuple[str, int]]:
        """Each directory that has sessions and its latest activity (ms), most recent first."""
        return [(row[0], int(row[1])) for row in await self.db.fetch(sql.SESSION_DIRECTORIES)]

    async def message_count(self, session_id: str) -> int:
        row = await self.db.fetch_one(sql.MESSAGE_COUNT, {"session_id": session_id})
        return int(row[0]) if row else 0

    async def window(self, session_id: str) -> WindowRows:
        """A session's window (``WindowRows``), in one read."""
        window, waiting = _WindowRows(session_id), set()
        for row in await self.db.fetch(sql.WINDOW, {"session_id": session_id}):
            if row[0] == 2:
                waiting.add(row[1])
            else:
                window.take(*row)
        return window.rows(waiting, self._windows)

    async def latest_summary(self, session_id: str) -> Row | None:
        return await self.db.fetch_one(sql.LATEST_SUMMARY, {"session_id": session_id})

    async def copy_source(self, session_id: str, before_id: str | None) -> list[tuple[str, str, int, str, list[str]]]:
        """Messages (id, role, created, info JSON, part JSONs) whose ids sort before ``before_id``
        (all when None), in id order, as stored: for copying without decoding."""
        rows = await self.db.fetch(sql.COPY_SOURCE, {"session_id": session_id, "before_id": before_id})
        if not rows:
            return []
        parts: dict[str, list[str]] = {row[0]: [] for row in rows}
        first, last = min(parts), max(parts)
        for message_id, data in await self.db.fetch(
            sql.PARTS_IN_RANGE, {"session_id": session_id, "first": first, "last": last}
        ):
            bucket = parts.get(message_id)
            if bucket is not None:
                bucket.append(data)
        return [(row[0], row[1], row[2], row[3], parts[row[0]]) for row in rows]

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        row = await self.db.fetch_one(sql.MESSAGE_SEQ, {"id": message_id, "session_id": session_id})
        return int(row[0]) if row else None

    async def shared_session(self, token: str) -> str | None:
        row = await self.db.fetch_one(sql.SHARE_SESSION, {"token": token})
        return row[0] if row else None

    async def message(self, session_id: str, message_id: str) -> MessageWithParts | None:
        rows = await self.db.fetch(sql.MESSAGE_WITH_PARTS, {"id": message_id, "session_id": session_id})
        if not rows or rows[0][0] != 0:
            return None
        return {"info": loads(rows[0][1]), "parts": [loads(row[1]) for row in rows[1:]]}

    async def last_assistant(self, session_id: str, parent_id: str | None = None) -> MessageWithParts | None:
        """The newest assistant message of a session (answering ``parent_id`` when given)."""
        rows = await self.db.fetch(sql.LAST_ASSISTANTS, {"session_id": session_id, "limit": 50 if parent_id else 1})
        for message_id, info in rows:
            if parent_id is None or loads(info).get("parentID") == parent_id:
                return await self.message(session_id, message_id)
        return None

    async def step_work(self, session_id: str) -> StepWork | None:
        """The session, its unsettled inputs and their window, in one read (None: no such session)."""
        session: Session | None = None
        inputs: list[InputRow] = []
        window = _WindowRows(session_id)
        for kind, key, data, seq, tail, version, created in await self.db.fetch(
            sql.STEP_WORK, {"session_id": session_id}
        ):
            if kind == 4:
                session = loads(data)
            elif kind == 5:  # id, prompt, admitted seq, delivery, promoted seq, time created
                inputs.append(InputRow(key, session_id, data, tail, seq, version, False, created))
            else:
                window.take(kind, key, data, seq, tail, version, created)
        if session is None:
            return None
        waiting = {row.id for row in inputs if row.promoted_seq is None}
        return StepWork(session, inputs, window.rows(waiting, self._windows) if inputs else None)

    async def unsettled_inputs(self, session_id: str) -> list[InputRow]:
        """Inputs admitted and not yet answered, in admission order."""
        return [InputRow(*row) for row in await self.db.fetch(sql.UNSETTLED_INPUTS, {"session_id": session_id})]

    async def open_assistant_messages(self, session_id: str | None = None) -> list[tuple[str, str]]:
        """``(session_id, message_id)`` of every assistant message never completed (of one session)."""
        statement = sql.open_assistant_messages(of_session=session_id is not None)
        return [(row[0], row[1]) for row in await self.db.fetch(statement, {"session_id": session_id})]

    async def open_tool_parts(self, session_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """``(session_id, part)`` of tool parts still pending or running (of one session)."""
        statement = sql.open_tool_parts(of_session=session_id is not None)
        found = [(row[0], loads(row[1])) for row in await self.db.fetch(statement, {"session_id": session_id})]
        return [(sid, part) for sid, part in found if (part.get("state") or {}).get("status") in ("pending", "running")]

    async def sessions_with_unsettled_inputs(self) -> list[str]:
        return [row[0] for row in await self.db.fetch(sql.SESSIONS_WITH_UNSETTLED_INPUTS)]

    async def unsettled_input_count(self) -> int:
        """Prompts admitted and not yet answered, in every session."""
        row = await self.db.fetch_one(sql.UNSETTLED_INPUT_COUNT)
        return int(row[0]) if row else 0

    async def ping(self) -> None:
        """A round trip to the database; raises what the engine raises when it does not answer."""
        await self.db.fetch(sql.PING)

    async def usage_since(self, since_ms: int) -> list[UsageRow]:
        """What every assistant message created since ``since_ms`` spent. A scan of the messages
        (no index on their time): for the usage report, not for a hot path."""
        rows = await self.db.fetch(sql.ASSISTANT_MESSAGES_SINCE, {"since": since_ms})
        return [_usage_row(int(row[0]), row[1], row[2]) for row in rows]


# -- reads inside a write transaction (``Reader``: they see its queued writes) -------------------


async def session_info(reader: Reader, session_id: str) -> Session | None:
    rows = await reader.fetch(sql.SESSION_INFO, {"id": session_id})
    return loads(rows[0][0]) if rows else None


async def session_exists(reader: Reader, session_id: str) -> bool:
    return bool(await reader.fetch(sql.SESSION_INFO, {"id": session_id}))


async def message_id_taken(reader: Reader, message_id: str) -> bool:
    """Whether any session has a message with this id."""
    return bool(await reader.fetch(sql.MESSAGE_ID_EXISTS, {"id": message_id}))


async def part_id_taken(reader: Reader, part_id: str) -> bool:
    """Whether any message has a part with this id."""
    return bool(await reader.fetch(sql.PART_ID_EXISTS, {"id": part_id}))


async def message_seq(reader: Reader, session_id: str, message_id: str) -> int | None:
    """The position at which the message entered the session's history."""
    rows = await reader.fetch(sql.MESSAGE_SEQ, {"id": message_id, "session_id": session_id})
    return int(rows[0][0]) if rows else None


async def message_ids_from_seq(reader: Reader, session_id: str, seq: int) -> list[str]:
    """The messages that entered the session at or after ``seq``, in entry order."""
    return [row[0] for row in await reader.fetch(sql.MESSAGES_FROM_SEQ, {"session_id": session_id, "seq": seq})]


async def part_ids_from(reader: Reader, message_id: str, part_id: str) -> list[str]:
    """The message's parts from ``part_id`` on, in order."""
    return [row[0] for row in await reader.fetch(sql.PART_IDS_FROM, {"message_id": message_id, "part_id": part_id})]
