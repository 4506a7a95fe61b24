"""Questions the agent asks the user (the ``question`` tool), as OpenCode asks them.

``ask`` publishes ``question.asked`` (and ``question.v2.asked``) and blocks the tool until the
user answers (``question.replied``: the answers, one list of labels per question) or dismisses it
(``question.rejected``: the tool fails with ``QuestionRejected`` and the turn stops). Questions
live in memory only: an abort rejects the session's question, and after a restart recovery has
already failed the waiting tool part, so nothing is left to list or answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app import ids
from app.events.log import EventLog
from app.events.model import Event
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.agents._requests import PendingRequests
from app.runtime.errors import QuestionNotFound
from app.wire import Session

Answers = list[list[str]]


class QuestionRejected(Exception):
    """The user dismissed the question; the message is what the tool part shows."""

    def __init__(self) -> None:
        super().__init__("The user dismissed this question")


@dataclass
class _Pending:
    info: dict[str, Any]
    directory: str | None
    answer: asyncio.Future[Answers | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Questions(PendingRequests[_Pending]):
    ASKED = "question.asked"
    SETTLED = ("question.replied", "question.rejected")

    def __init__(self, log: EventLog) -> None:
        super().__init__()
        self.log = log

    def not_found(self, request_id: str) -> Exception:
        return QuestionNotFound(request_id)

    async def ask(
        self,
        session: Session,
        questions: list[dict[str, Any]],
        *,
        tool: dict[str, str] | None,
        signal: AbortSignal,
    ) -> Answers:
        """Return the user's answers; raise QuestionRejected if they dismiss it, Aborted on abort
        (the question is rejected then, so it never outlives the turn that asked it)."""
        info: dict[str, Any] = {"id": ids.new_id("question"), "sessionID": session["id"], "questions": questions}
        if tool:
            info["tool"] = tool
        directory = session["directory"]
        pending = _Pending(info, directory)
        self._pending[info["id"]] = pending
        self._announce(directory, "question.asked", info)
        try:
            answers = await signal.race(asyncio.shield(pending.answer))
        except Aborted:
            self._settle(pending, None, directory)
            raise
        finally:
            self._pending.pop(info["id"], None)
        if answers is None:
            raise QuestionRejected
        return answers

    def reply(self, request_id: str, answers: Answers, *, directory: str | None = None) -> None:
        """Answer a pending question. Settling is synchronous, so a reply and an abort never both
        win: whichever comes second finds the question gone (QuestionNotFound)."""
        self._settle(self._take(request_id), answers, directory)

    def reject(self, request_id: str, *, directory: str | None = None) -> None:
        self._settle(self._take(request_id), None, directory)

    def _take(self, request_id: str) -> _Pending:
        pending = self._pending.get(request_id)
        if pending is None or pending.answer.done():
            raise QuestionNotFound(request_id)
        return pending

    def _settle(self, pending: _Pending, answers: Answers | None, directory: str | None) -> None:
        if pending.answer.done():
            return
        pending.answer.set_result(answers)
        props: dict[str, Any] = {"sessionID": pending.info["sessionID"], "requestID": pending.info["id"]}
        if answers is None:
            self._announce(directory, "question.rejected", props)
        else:
            self._announce(directory, "question.replied", {**props, "answers": answers})

    def _announce(self, directory: str | None, kind: str, props: dict[str, Any]) -> None:
        session_id = props.get("sessionID")
        self.log.publish(Event(kind, props, session_id, directory))
        self.log.publish(Event(kind.replace("question.", "question.v2.", 1), dict(props), session_id, directory))
