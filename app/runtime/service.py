"""The runtime: one object that wires storage, the event log, providers, the coordinator and the
runner, and offers the operations every protocol translator (legacy, V2) calls."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from app import ids
from app.config import ConfigLoader
from app.events.bus import EventBus
from app.events.log import EventLog
from app.events.model import Event
from app.providers.registry import ModelRef, ProviderRegistry
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.agents import Agents, Permissions
from app.runtime.errors import SessionNotFound
from app.runtime.history import History, Reverts, Shares, Snapshots, Window
from app.runtime.inputs import Admission, Admitted, InputWaiters, PromptRequest, compaction_request
from app.runtime.payloads import next_event
from app.runtime.sessions import DrainCoordinator, SessionService, recover
from app.runtime.tools import FileChanges, TodoStore, ToolServices
from app.runtime.turn import Commands, Runner, TitleGenerator, ToolCalls
from app.settings import Settings
from app.store.database import Database
from app.store.queries import MessageWithParts, Queries


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(settings.database_url)
        self.bus = EventBus(settings.subscriber_queue_size)
        self.log = EventLog(self.db, self.bus)
        self.queries = Queries(self.db)
        self.config = ConfigLoader(settings.config_dir)
        self.registry = ProviderRegistry(self.config)
        self.sessions = SessionService(self.log, self.queries)
        self.waiters = InputWaiters()
        self.titles = TitleGenerator(self.sessions)
        self.coordinator = DrainCoordinator(self._drain, self._publish_status)
        self.history = History(self.log, self.queries, self.sessions, self.coordinator)
        self.agents = Agents(self.config)
        self.admission = Admission(self.log, self.sessions, self.registry, self.history, self.agents)
        self.snapshots = Snapshots(self.log, self.queries)
        self.permissions = Permissions(self.log, self.config, self.agents)
        self.tool_state = ToolServices(todos=TodoStore(self.log), files=FileChanges(self.log), tasks=self)
        self.toolcalls = ToolCalls(self.permissions, self.tool_state)
        self.commands = Commands(self)
        self.runner = Runner(
            self.log,
            self.queries,
            self.sessions,
            self.registry,
            self.titles,
            self.waiters,
            self.history,
            self.admission,
            self.snapshots,
            self.config,
            self.toolcalls,
            settings.part_flush_seconds,
        )
        self.runner.coordinator = self.coordinator
        self.reverts = Reverts(self.log, self.history)
        self.shares = Shares(self.log, self.history)

    async def _drain(self, session_id: str, signal: AbortSignal) -> None:
        """The coordinator's drain (the runner is built after the coordinator it reports to)."""
        await self.runner.drain(session_id, signal)

    async def start(self) -> None:
        await self.db.open()
        await self.log.start()
        await recover(self.log, self.queries, self.sessions, self.coordinator)

    async def stop(self) -> None:
        await self.coordinator.shutdown()
        await self.titles.stop()
        await self.registry.aclose()
        await self.db.close()

    def _publish_status(self, session_id: str, status: dict[str, Any]) -> None:
        """Announce a status change at once (synchronously, so announcements keep their order)."""
        directory = self.sessions.cached_directory(session_id)
        self.log.publish(Event("session.status", {"sessionID": session_id, "status": status}, session_id, directory))
        if status["type"] == "idle":
            self.log.publish(Event("session.idle", {"sessionID": session_id}, session_id, directory))
            self.waiters.settle_session(session_id)

    # -- operations ---------------------------------------------------------------------------

    async def prompt(self, session_id: str, request: PromptRequest, *, resume: bool = True) -> Admitted:
        """Admit, then wake the session's drain (unless ``resume`` is false: a running drain still
        picks the prompt up). Returns once the prompt is durable."""
        admitted = await self.admission.admit(session_id, request)
        if resume and not request.no_reply:
            self.coordinator.wake(session_id)
        return admitted

    async def prompt_and_wait(self, session_id: str, request: PromptRequest) -> MessageWithParts:
        """Admit, wait until this prompt's turn has settled, and return the message that answers
        it (the user message itself for ``noReply``); an aborted turn returns its aborted reply."""
        message_id = (await self.prompt(session_id, request)).message_id
        if request.no_reply:
            return await self.history.get_message(session_id, message_id)
        # Registered before the input is read: a settle in between still resolves the waiter. An
        # idle announcement releases every waiter of the session (an abort), so re-check then:
        # a prompt admitted during an abort's clean-up is answered by the drain that follows.
        while True:
            waiter = self.waiters.register(session_id, message_id)
            row = await self.queries.input(message_id)
            if row is None or row.completed or not self.coordinator.is_active(session_id):
                break
            await waiter
        reply = await self.queries.last_assistant(session_id, parent_id=message_id)
        if reply is None:
            reply = await self.queries.last_assistant(session_id)
        return reply if reply is not None else await self.history.get_message(session_id, message_id)

    async def abort(self, session_id: str) -> None:
        """Legacy abort: stop the turn and drop the prompts queued behind it (they stay in the
        history unanswered). When nothing runs OpenCode still announces idle."""
        if not await self._stop(session_id):
            with suppress(SessionNotFound):
                await self.sessions.get(session_id)
                self._publish_status(session_id, {"type": "idle"})

    async def _stop(self, session_id: str) -> bool:
        """Interrupt the session's drain and drop the prompts admitted so far that it has not
        answered; a prompt admitted after this call is answered by a new drain."""
        through = await self.log.committed_seq(session_id)
        return await self.coordinator.interrupt(session_id, settle_through=through)

    async def summarize(self, session_id: str, model: ModelRef | None = None) -> None:
        """Compact the session's history now and return once the summary is stored (or failed)."""
        admitted = await self.prompt(session_id, compaction_request("manual", model))
        waiter = self.waiters.register(session_id, admitted.message_id)
        if self.coordinator.is_active(session_id):
            await waiter

    async def context(self, session_id: str) -> Window:
        """What the model sees next: the newest snapshot and the messages after it."""
        await self.sessions.get(session_id)
        return await self.snapshots.window(session_id)

    async def run(
        self, parent: dict[str, Any], description: str, prompt: str, agent: str, signal: AbortSignal
    ) -> tuple[dict[str, Any], str]:
        """The ``task`` tool: run ``prompt`` in a new child session and return its final answer.
        Aborting the parent's turn interrupts the child too."""
        child = await self.sessions.create(
            parent["directory"], parent_id=parent["id"], title=f"{description} (@{agent} subagent)"
        )
        model = parent.get("model")
        request = PromptRequest(
            parts=[{"type": "text", "text": prompt}],
            agent=agent,
            model=ModelRef(model["providerID"], model["id"]) if model else None,
        )
        try:
            reply = await signal.race(self.prompt_and_wait(child["id"], request))
        except Aborted:
            await self._stop(child["id"])
            raise
        text = "".join(p.get("text", "") for p in reply["parts"] if p["type"] == "text")
        return child, text or "(the sub-agent gave no answer)"

    async def reply_permission(
        self, request_id: str, reply: str, message: str | None, *, session_id: str | None = None
    ) -> None:
        info = self.permissions.get(request_id, session_id=session_id)
        directory = self.sessions.cached_directory(info["sessionID"])
        await self.permissions.reply(request_id, reply, message, directory=directory)

    async def interrupt(self, session_id: str) -> None:
        """V2 interrupt: stop the running step; prompts still waiting stay admitted and run at the
        next wake."""
        await self.sessions.get(session_id)
        await self.coordinator.interrupt(session_id)

    async def wait_idle(self, session_id: str) -> None:
        await self.sessions.get(session_id)
        await self.coordinator.await_idle(session_id)

    async def switch(self, session_id: str, *, agent: str | None = None, model: ModelRef | None = None) -> None:
        """Change the agent or model later prompts use, recorded as a ``session.next.*`` event."""
        session = await self.sessions.get(session_id)
        if model is not None:
            self.admission.model_for(session, model)  # unknown models are refused here
        async with self.log.transaction() as tx:

            def change(info: dict[str, Any]) -> None:
                if agent is not None:
                    info["agent"] = agent
                if model is not None:
                    info["model"] = {"id": model.model_id, "providerID": model.provider_id, "variant": "default"}

            info = await self.sessions.mutate(tx, session_id, change)
            kind, value = ("agent.switched", agent) if agent is not None else ("model.switched", info["model"])
            field = "agent" if agent is not None else "model"
            await tx.emit(
                f"session.next.{kind}",
                next_event(session_id, messageID=ids.message_id(), **{field: value}),
                session_id=session_id,
                directory=info["directory"],
            )

    async def delete_session(self, session_id: str) -> None:
        tree = await self.sessions.subtree(session_id)
        for info in tree:
            await self._stop(info["id"])
        await self.sessions.delete(tree)
