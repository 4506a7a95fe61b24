"""Durable admission: a prompt is validated and committed (user message, parts, session
agent/model and the input row, with their events) before anyone answers the client; only then is
the session's drain woken.

Idempotency: a client-chosen message id that was already admitted with the same request is a
no-op returning the same id; with a different request, or an id used by another message, it is a
conflict. The check runs inside the write transaction, so two racing retries cannot both insert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction
from app.jsonutil import dumps, loads
from app.providers.registry import ModelNotFoundError, ModelRef, ProviderRegistry
from app.runtime.errors import InputConflict, InvalidInput
from app.runtime.sessions import SessionService
from app.store import sql
from app.store.queries import InputRow

DEFAULT_AGENT = "build"


@dataclass(slots=True)
class PromptRequest:
    parts: list[dict[str, Any]]
    message_id: str | None = None
    model: ModelRef | None = None
    agent: str | None = None
    system: str | None = None
    no_reply: bool = False
    tools: dict[str, bool] | None = None
    variant: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def canonical(self) -> dict[str, Any]:
        """The request as compared on retry (everything the client chose, nothing we generated)."""
        return loads(
            dumps(
                {
                    "parts": self.parts,
                    "model": [self.model.provider_id, self.model.model_id] if self.model else None,
                    "agent": self.agent,
                    "system": self.system,
                    "noReply": self.no_reply,
                    "tools": self.tools,
                    "variant": self.variant,
                }
            )
        )


@dataclass(slots=True)
class Admitted:
    message_id: str
    created: bool  # False when this was an idempotent retry


class _Duplicate(Exception):
    """Internal: the request repeats an admitted prompt; the transaction is rolled back empty."""


class Admission:
    def __init__(self, log: EventLog, sessions: SessionService, registry: ProviderRegistry) -> None:
        self.log = log
        self.sessions = sessions
        self.registry = registry

    def _model_for(self, session: dict[str, Any], request: PromptRequest) -> ModelRef:
        if request.model is not None:
            ref = request.model
        elif session.get("model"):
            ref = ModelRef(session["model"]["providerID"], session["model"]["id"])
        else:
            ref = self.registry.default_model(session["directory"])
        try:
            self.registry.resolve(session["directory"], ref)
        except ModelNotFoundError as exc:
            raise InvalidInput(f"{exc}. Configure it in opencode.json or choose another model.") from exc
        return ref

    async def admit(self, session_id: str, request: PromptRequest) -> Admitted:
        try:
            return await self._admit(session_id, request)
        except _Duplicate:
            return Admitted(request.message_id or "", created=False)

    async def _admit(self, session_id: str, request: PromptRequest) -> Admitted:
        session = await self.sessions.get(session_id)
        ref = self._model_for(session, request)
        agent = request.agent or session.get("agent") or DEFAULT_AGENT
        message_id = request.message_id or ids.message_id()
        canonical = request.canonical()
        directory = session["directory"]
        async with self.log.transaction() as tx:
            if request.message_id is not None:  # ids we generate are new by construction
                await self._check_reuse(tx, session_id, message_id, canonical)
            created = now_ms()
            info: dict[str, Any] = {
                "id": message_id,
                "sessionID": session_id,
                "role": "user",
                "time": {"created": created},
                "agent": agent,
                "model": {"providerID": ref.provider_id, "modelID": ref.model_id},
            }
            if request.system:
                info["system"] = request.system
            if request.tools is not None:
                info["tools"] = request.tools
            if request.variant:
                info["model"]["variant"] = request.variant
            admitted = await tx.emit(
                "message.updated", {"sessionID": session_id, "info": info}, session_id=session_id, directory=directory
            )
            for part in request.parts:
                stored = {
                    **part,
                    "id": part.get("id") or ids.part_id(),
                    "sessionID": session_id,
                    "messageID": message_id,
                }
                await tx.emit(
                    "message.part.updated",
                    {"sessionID": session_id, "part": stored, "time": now_ms()},
                    session_id=session_id,
                    directory=directory,
                )

            def remember_choice(s: dict[str, Any]) -> None:
                s["agent"] = agent
                s["model"] = {
                    "id": ref.model_id,
                    "providerID": ref.provider_id,
                    "variant": request.variant or "default",
                }

            await self.sessions.mutate(tx, session_id, remember_choice)
            stored_prompt = {
                "request": canonical,
                "agent": agent,
                "system": request.system,
                "model": {"providerID": ref.provider_id, "modelID": ref.model_id},
            }
            tx.execute(
                sql.INSERT_INPUT,
                {
                    "id": message_id,
                    "session_id": session_id,
                    "prompt": dumps(stored_prompt),
                    "delivery": "queue",
                    "admitted_seq": admitted.seq,
                    "promoted_seq": None,
                    "completed": request.no_reply,
                    "time_created": created,
                },
            )
        return Admitted(message_id, created=True)

    @staticmethod
    async def _check_reuse(tx: Transaction, session_id: str, message_id: str, canonical: dict[str, Any]) -> None:
        """A client-chosen id: an identical retry ends admission early (``_Duplicate``), any other
        reuse of the id is a conflict."""
        rows = await tx.fetch(sql.INPUT_BY_ID, {"id": message_id})
        if rows:
            row = InputRow(*rows[0])
            if row.session_id == session_id and loads(row.prompt)["request"] == canonical:
                raise _Duplicate
            raise InputConflict(message_id)
        if await tx.fetch(sql.MESSAGE_ID_EXISTS, {"id": message_id}):
            raise InputConflict(message_id)
