"""Durable admission: a prompt is validated and committed (its input row and events, and for the
legacy protocol its user message and parts) before anyone answers the client; only then is the
session's drain woken.

- ``delivery``: ``queue`` prompts each get their own turn, oldest first; ``steer`` prompts are
  promoted at the next step boundary, before any queued prompt (the runner applies this).
- ``deferred`` (the V2 protocol): the user message is written when the prompt is promoted into a
  turn, not at admission, so an admitted-but-waiting prompt is not yet part of the history.
- Idempotency: a client-chosen message id already admitted with the same request returns the same
  record; with a different request, or an id used by another message, it is a conflict. The check
  runs inside the write transaction, so two racing retries cannot both insert.
- Busy from the commit: on a shared database a prompt that will wake the drain (``reserve``)
  reserves the session's lease in the same transaction, so every process reads the session busy
  before the client hears the prompt was taken (``Topology.reserve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import ids
from app.clock import now_ms
from app.events.log import EventLog, Transaction
from app.events.model import Event
from app.jsonutil import dumps, loads
from app.providers.registry import ModelNotFoundError, ModelRef, ProviderRegistry
from app.runtime.agents import Agents, tools_rules
from app.runtime.errors import InputConflict, InvalidInput, RequestKeyConflict
from app.runtime.history import History, commit_staged
from app.runtime.inputs._stored import StoredPrompt
from app.runtime.payloads import next_event
from app.runtime.sessions import SessionService, Topology
from app.store import inputs
from app.store.queries import InputRow, message_id_taken
from app.wire import Session, UserMessage

DEFAULT_AGENT = "build"
DELIVERIES = ("steer", "queue")


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
    delivery: str = "queue"
    deferred: bool = False
    # "manual" or "auto" for a request to summarize the history (the runner's compaction step).
    compaction: str | None = None
    # The prompt as the V2 protocol shows it ({text, files?, agents?}); derived from parts if absent.
    view: dict[str, Any] | None = None
    # The request's Idempotency-Key: the same request sent again with it is the same prompt.
    request_key: str | None = None

    def canonical(self) -> dict[str, Any]:
        """The request as compared on retry (everything the client chose, nothing we generated)."""
        compared: dict[str, Any] = loads(
            dumps(
                {
                    "parts": self.parts,
                    "model": [self.model.provider_id, self.model.model_id] if self.model else None,
                    "agent": self.agent,
                    "system": self.system,
                    "noReply": self.no_reply,
                    "tools": self.tools,
                    "variant": self.variant,
                    "delivery": self.delivery,
                    "deferred": self.deferred,
                    "compaction": self.compaction,
                }
            )
        )
        return compared

    def prompt_view(self) -> dict[str, Any]:
        if self.view is not None:
            return self.view
        view: dict[str, Any] = {"text": "".join(p.get("text", "") for p in self.parts if p["type"] == "text")}
        files = [{"uri": p["url"], "mime": p["mime"]} for p in self.parts if p["type"] == "file"]
        if files:
            view["files"] = files
        return view


@dataclass(slots=True)
class Admitted:
    record: InputRow
    created: bool  # False when this was an idempotent retry
    wake: bool = True  # False: another process's drain answers it (``Topology.reserve``)

    @property
    def message_id(self) -> str:
        return self.record.id


def user_message_info(session_id: str, message_id: str, stored: StoredPrompt, created: int) -> UserMessage:
    info: UserMessage = {
        "id": message_id,
        "sessionID": session_id,
        "role": "user",
        "time": {"created": created},
        "agent": stored.agent,
        "model": dict(stored.model),
    }
    if stored.system is not None:
        info["system"] = stored.system
    if stored.tools is not None:
        info["tools"] = stored.tools
    return info


def compaction_request(reason: str, model: ModelRef | None, variant: str | None = None) -> PromptRequest:
    """A request to summarize the history: a user message with a compaction part, as OpenCode
    records it (with the model and variant of the turn it follows). Automatic ones steer (they run
    at the next step boundary, before queued work)."""
    return PromptRequest(
        parts=[{"type": "compaction", "auto": reason == "auto"}],
        model=model,
        variant=variant,
        delivery="steer" if reason == "auto" else "queue",
        compaction=reason,
        view={"text": ""},
    )


def is_compaction(row: InputRow) -> bool:
    return StoredPrompt.from_json(row.prompt).compaction is not None


class _Duplicate(Exception):
    """Internal: the request repeats an admitted prompt; the transaction is rolled back empty."""

    def __init__(self, record: InputRow) -> None:
        super().__init__(record.id)
        self.record = record


class Admission:
    def __init__(
        self,
        log: EventLog,
        sessions: SessionService,
        registry: ProviderRegistry,
        history: History,
        agents: Agents,
        topology: Topology,
    ) -> None:
        self.log = log
        self.sessions = sessions
        self.registry = registry
        self.history = history
        self.agents = agents
        self.topology = topology

    def model_for(self, session: Session, requested: ModelRef | None, agent: str | None = None) -> ModelRef:
        """The prompt's model, else the agent's (opencode.json), else the session's last, else the
        default. One no connected provider offers raises ``ModelNotFoundError`` (with suggestions)."""
        configured = self.agents.get(session["directory"], agent).model if agent else None
        if requested is not None:
            ref = requested
        elif configured and "/" in configured:
            ref = ModelRef(*configured.split("/", 1))
        elif session.get("model"):
            ref = ModelRef(session["model"]["providerID"], session["model"]["id"])
        else:
            ref = self.registry.default_model(session["directory"])
        self.registry.resolve(session["directory"], ref)
        return ref

    def variant_for(self, directory: str, agent: str, ref: ModelRef, requested: str | None) -> str | None:
        """The prompt's variant, else the agent's (``agent.<name>.variant``) when the prompt uses
        the agent's own model and that model has the variant, as OpenCode picks it. Validates the
        agent's model settings first, so a malformed one fails the prompt with a 400."""
        found = self.agents.get(directory, agent)
        default = found.tuning().variant
        if requested or not default or found.model != str(ref):
            return requested
        return default if default in self.registry.resolve(directory, ref)[1].variants else None

    async def admit(self, session_id: str, request: PromptRequest, *, reserve: bool = False) -> Admitted:
        """Admit ``request``; ``reserve``: the caller wakes the drain next, so on a shared
        database the session is busy from this commit on (a ``noReply`` prompt wakes nothing)."""
        if request.delivery not in DELIVERIES:
            raise InvalidInput(f"delivery must be one of {DELIVERIES}")
        try:
            return await self._admit(session_id, request, reserve and not request.no_reply)
        except _Duplicate as duplicate:
            return Admitted(duplicate.record, created=False)
        except ModelNotFoundError as exc:
            # Refused before anything is stored; clients that only watch events (the TUI) see
            # it as OpenCode shows it, a session.error naming the model and the suggestions.
            session = await self.sessions.get(session_id)
            error = {"name": "UnknownError", "data": {"message": str(exc)}}
            props = {"sessionID": session_id, "error": error}
            self.log.publish(Event("session.error", props, session_id, session["directory"]))
            raise

    async def _admit(self, session_id: str, request: PromptRequest, reserve: bool) -> Admitted:
        canonical = request.canonical()
        view = request.prompt_view()
        async with self.log.transaction(urgent=True, hold=session_id) as tx:
            # The session as it stands under its hold (on a shared database read with the hold
            # itself: no round trip of its own).
            session = await self.sessions.current(tx, session_id)
            stored = self._stored(session, request, canonical, view)
            directory = session["directory"]
            # Made under the session's hold, so the ids of a session's prompts (the order clients
            # list them in) ascend in the order they are admitted, and answered.
            message_id, created = request.message_id or ids.message_id(), now_ms()
            if request.message_id is not None:  # ids we generate are new by construction
                await self._check_reuse(tx, session_id, message_id, canonical)
            if request.request_key is not None:
                await self._check_repeat(tx, session_id, request.request_key, canonical)
            # A staged revert never coexists with a turn or a shell command (Reverts stages none
            # while anything runs, and both commit it as they begin), so committing it here cannot
            # remove what a running turn wrote. The drain may be running even so, with nothing
            # to answer yet (woken by a takeover, or in its pass after a turn): this prompt is
            # then its next turn, which must continue from the revert point.
            await commit_staged(tx, self.history, session)
            admitted = await tx.emit(
                "session.next.prompt.admitted",
                next_event(session_id, messageID=message_id, prompt=view, delivery=request.delivery),
                session_id=session_id,
                directory=directory,
            )
            if not request.deferred:
                info = user_message_info(session_id, message_id, stored, created)
                await self.history.append_message(tx, session, info, stored.parts)

            def remember_choice(s: Session) -> None:
                if request.tools:  # the deprecated tools map becomes session permission rules
                    replaced = set(request.tools)
                    kept = [r for r in s.get("permission") or [] if r["permission"] not in replaced]
                    s["permission"] = kept + tools_rules(request.tools)
                s["agent"] = stored.agent
                s["model"] = {
                    "id": stored.model["modelID"],
                    "providerID": stored.model["providerID"],
                    "variant": stored.model.get("variant") or "default",
                }

            await self.sessions.mutate(tx, session_id, remember_choice)
            record = InputRow(
                id=message_id,
                session_id=session_id,
                prompt=stored.to_json(),
                delivery=request.delivery,
                admitted_seq=admitted.seq or 0,
                promoted_seq=None,
                completed=request.no_reply,
                time_created=created,
                request_key=request.request_key,
            )
            inputs.insert(tx.scope, record)
            wake = self.topology.reserve(tx, session_id, directory) if reserve else True
        return Admitted(record, created=True, wake=wake)

    def _stored(
        self, session: Session, request: PromptRequest, canonical: dict[str, Any], view: dict[str, Any]
    ) -> StoredPrompt:
        """The prompt as stored: the request with the agent, model and variant it runs with."""
        agent = request.agent or session.get("agent") or DEFAULT_AGENT
        ref = self.model_for(session, request.model, request.agent)
        requested = request.variant
        if requested is None and request.deferred and request.model is None and session.get("model"):
            # A V2 prompt names no model: it uses the session's, with the variant chosen with it.
            chosen = session["model"].get("variant")
            requested = chosen if chosen != "default" else None
        variant = self.variant_for(session["directory"], agent, ref, requested)
        return StoredPrompt(
            request=canonical,
            agent=agent,
            model={"providerID": ref.provider_id, "modelID": ref.model_id} | ({"variant": variant} if variant else {}),
            prompt=view,
            parts=request.parts,
            system=request.system,
            tools=request.tools,
            deferred=request.deferred,
            compaction=request.compaction,
        )

    @staticmethod
    async def _check_reuse(tx: Transaction, session_id: str, message_id: str, canonical: dict[str, Any]) -> None:
        """A client-chosen id: an identical retry ends admission early (``_Duplicate``), any other
        reuse of the id is a conflict."""
        row = await inputs.by_id(tx.scope, message_id)
        if row is not None:
            if not _repeats(row, session_id, canonical):
                raise InputConflict(message_id)
            raise _Duplicate(row)
        if await message_id_taken(tx.scope, message_id):
            raise InputConflict(message_id)

    @staticmethod
    async def _check_repeat(tx: Transaction, session_id: str, key: str, canonical: dict[str, Any]) -> None:
        """An Idempotency-Key already used in the session: the same request again (a retry) ends
        admission early (``_Duplicate``); a different one under that key is a conflict."""
        row = await inputs.by_request_key(tx.scope, session_id, key)
        if row is not None:
            if not _repeats(row, session_id, canonical):
                raise RequestKeyConflict(key)
            raise _Duplicate(row)


def _repeats(row: InputRow, session_id: str, canonical: dict[str, Any]) -> bool:
    """Whether admitting ``canonical`` in ``session_id`` would repeat the prompt of ``row``."""
    return row.session_id == session_id and StoredPrompt.from_json(row.prompt).request == canonical
