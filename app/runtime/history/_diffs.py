"""What a session changed in its files, read off its step snapshots (so a change made by bash
counts as much as one made by write or edit):

- a step's changes: its ``patch`` part (the snapshot it started from and the files it changed);
- a prompt's diff: from the first step-start to the last step-finish of the assistant messages
  answering it (the user message's ``summary.diffs``, and ``GET /session/:id/diff?messageID=``);
- the session's diff: the same across every message before the revert point, if any (the
  ``session.diff`` event behind the clients' "Modified Files", the session's ``summary`` counts
  and ``GET /session/:id/diff``).

The revert point follows OpenCode's rule: the given part, if something was said before it in its
message; otherwise (a whole message, or its first words) the user message that led to it. The
patches to undo are those of every part after the point (OpenCode skips the steps between that
user message and the given one; we undo them too, since a commit removes them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.events.log import Transaction
from app.events.model import Event
from app.runtime.errors import RevertFailed
from app.runtime.history._service import History
from app.runtime.snapshots import FileSnapshots
from app.wire import MessageWithParts as Message
from app.wire import PatchPart, Session


@dataclass
class RevertPlan:
    point: dict[str, Any]
    patches: list[PatchPart] = field(default_factory=list)
    kept: list[Message] = field(default_factory=list)  # the messages (and parts) before the point
    undone: list[Message] = field(default_factory=list)  # the messages after it

    def files(self) -> dict[str, str]:
        """Each file the undone steps changed, with the snapshot from before its first change.
        RevertFailed for a patch part that names no snapshot and files (an import can plant any)."""
        first: dict[str, str] = {}
        for patch in self.patches:
            snapshot, names = patch.get("hash"), patch.get("files")
            if (
                not isinstance(snapshot, str)
                or not isinstance(names, list)
                or not all(isinstance(n, str) for n in names)
            ):
                raise RevertFailed(f"Cannot revert: patch part {str(patch.get('id'))[:40]} is malformed")
            for name in names:
                first.setdefault(name, snapshot)
        return first


def plan_revert(messages: list[Message], message_id: str, part_id: str | None) -> RevertPlan:
    point: dict[str, Any] = {"messageID": message_id} | ({"partID": part_id} if part_id else {})
    last_user: str | None = None
    for message in messages:
        info = message["info"]
        if info["role"] == "user":
            last_user = info["id"]
        parts = message["parts"]
        index = next(
            (i for i, p in enumerate(parts) if (info["id"] == message_id and part_id is None) or p["id"] == part_id),
            None,
        )
        if index is None:
            continue
        said = any(p["type"] in ("text", "tool") for p in parts[:index])
        if said and part_id:
            point = {"messageID": info["id"], "partID": part_id}
        else:
            point = {"messageID": last_user or info["id"]}
        break
    return _split(point, messages)


def _split(point: dict[str, Any], messages: list[Message]) -> RevertPlan:
    """Divide the history at ``point``; the patches to undo are every patch part after it."""
    plan = RevertPlan(point)
    index = next((i for i, m in enumerate(messages) if m["info"]["id"] == point["messageID"]), len(messages))
    plan.kept, plan.undone = messages[:index], messages[index:]
    if "partID" in point and plan.undone:
        message, *later = plan.undone
        cut = next((i for i, p in enumerate(message["parts"]) if p["id"] == point["partID"]), 0)
        plan.kept = [*plan.kept, {"info": message["info"], "parts": message["parts"][:cut]}]
        plan.undone = [{"info": message["info"], "parts": message["parts"][cut:]}, *later]
    plan.patches = [p for m in plan.undone for p in m["parts"] if p["type"] == "patch"]
    return plan


def span(messages: Iterable[Message]) -> tuple[str | None, str | None]:
    """The first step-start snapshot and the last step-finish snapshot."""
    first: str | None = None
    last: str | None = None
    for message in messages:
        for part in message["parts"]:
            snapshot = part.get("snapshot")
            if not isinstance(snapshot, str) or not snapshot:
                continue
            if part["type"] == "step-start" and first is None:
                first = snapshot
            elif part["type"] == "step-finish":
                last = snapshot
    return first, last


def totals(diffs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "additions": sum(d["additions"] for d in diffs),
        "deletions": sum(d["deletions"] for d in diffs),
        "files": len(diffs),
    }


class SessionDiffs:
    def __init__(self, history: History, files: FileSnapshots) -> None:
        self.history = history
        self.files = files
        self.log = history.log
        self._baselines: dict[str, tuple[str, str]] = {}  # session -> (message id, its first snapshot)

    async def between(self, directory: str, messages: Iterable[Message]) -> list[dict[str, Any]]:
        first, last = span(messages)
        return await self.files.diff(directory, first, last) if first and last else []

    def active(self, session: Session, messages: list[Message]) -> list[Message]:
        """The messages before the session's revert point (all of them without one)."""
        revert = session.get("revert")
        if not revert:
            return messages
        return plan_revert(messages, revert["messageID"], revert.get("partID")).kept

    async def of_session(self, session: Session) -> list[dict[str, Any]]:
        messages = await self.history.get_messages(session["id"], by_seq=True)
        return await self.between(session["directory"], self.active(session, messages))

    async def of_message(self, session: Session, message_id: str) -> list[dict[str, Any]]:
        """The stored diffs of a user message; none for any other id (as OpenCode answers)."""
        message = await self.history.queries.message(session["id"], message_id)
        summary = message["info"].get("summary") if message else None
        return list(summary.get("diffs") or []) if isinstance(summary, dict) else []

    async def publish(self, tx: Transaction, session: Session, diffs: list[dict[str, Any]]) -> None:
        """Store the session's counts and announce its diff, inside ``tx``."""
        await self.history.sessions.mutate(tx, session["id"], lambda s: s.__setitem__("summary", totals(diffs)))
        tx.publish(
            Event("session.diff", {"sessionID": session["id"], "diff": diffs}, session["id"], session["directory"])
        )

    async def baseline(self, session: Session) -> str | None:
        """The session's first snapshot (its first step-start before any revert point), kept per
        session and re-read only once the message holding it is gone (a committed revert)."""
        session_id = session["id"]
        cached = self._baselines.get(session_id)
        if cached is not None and await self.history.queries.message_seq(session_id, cached[0]) is not None:
            return cached[1]
        messages = await self.history.get_messages(session_id, by_seq=True)
        for message in self.active(session, messages):
            first, _ = span([message])
            if first:
                self._baselines[session_id] = (message["info"]["id"], first)
                return first
        return None

    async def after_step(self, session: Session, user_message_id: str, first: str | None, end: str) -> None:
        """A step changed files: refresh the prompt's diffs (``first``: the snapshot its turn
        started from), the session's counts and its diff."""
        directory = session["directory"]
        prompt_diffs = await self.files.diff(directory, first, end) if first else []
        base = await self.baseline(session)
        session_diffs = await self.files.diff(directory, base, end) if base else []
        user = await self.history.queries.message(session["id"], user_message_id)
        async with self.log.transaction() as tx:
            if user is not None and user["info"]["role"] == "user":
                info = user["info"]
                info["summary"] = {**(info.get("summary") or {}), "diffs": prompt_diffs}
                await tx.emit(
                    "message.updated",
                    {"sessionID": session["id"], "info": info},
                    session_id=session["id"],
                    directory=directory,
                )
            await self.publish(tx, session, session_diffs)
