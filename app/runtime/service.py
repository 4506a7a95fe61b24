"""The runtime: the one object that wires the infrastructure and the domains together, and offers
the operations every protocol translator (legacy, V2) calls. What differs between one process
and a cluster is the sessions domain's ``Topology``; the operations here are written once."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from app import ids
from app.clock import now_ms
from app.config import ConfigError, reading
from app.events.feed import Feeds
from app.events.model import Event
from app.providers.registry import ModelRef
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.agents import AgentsDomain
from app.runtime.errors import PermissionNotFound, QuestionNotFound, SessionNotFound
from app.runtime.extensions import Extensions
from app.runtime.history import HistoryDomain, MessageWithParts, Window
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs import Admitted, InputsDomain, PromptRequest, compaction_request
from app.runtime.integrations import Integrations
from app.runtime.payloads import next_event
from app.runtime.sessions import SessionsDomain
from app.runtime.snapshots import FileSnapshots
from app.runtime.terminals import Terminals
from app.runtime.tools import Skills, ToolServices
from app.runtime.turn import TurnDomain
from app.runtime.workspace import Workspace
from app.settings import Settings
from app.wire import Session, SessionStatus

SETTLE_GRACE_SECONDS = 5.0
INSTANCE_DISPOSED = "server.instance.disposed"


class Runtime:
    """The composition root: builds the infrastructure and each domain from the ones below it,
    and offers the operations the protocol translators call. Routers reach services through the
    names set at the end of ``__init__``; no decision lives in them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.infra = infra = Infrastructure.create(settings)
        self._sessions = sessions = SessionsDomain.build(infra, self._drain, self._publish_status)
        self._topology = sessions.topology
        self.files = FileSnapshots(infra.settings.data_path, infra.config)
        history = HistoryDomain.build(infra, sessions, self.files)
        agents = AgentsDomain.build(infra, sessions.topology)
        inputs = InputsDomain.build(infra, sessions, history, agents)
        self.workspace = Workspace(
            infra.config, self._publish_instance_event
        )  # files, search and VCS: the routes and the tools share it
        self.skills = Skills(infra.config)
        self.tool_state = ToolServices.build(infra.log, tasks=self, workspace=self.workspace, skills=self.skills)
        self.extensions = Extensions(infra.config)  # MCP servers, per directory
        self.turn = TurnDomain.build(
            infra, sessions, inputs, history, agents, self.tool_state, self.extensions, prompter=self
        )
        # What the translators call, by name (each owned by its domain).
        self.db, self.bus, self.log, self.queries = infra.db, infra.bus, infra.log, infra.queries
        self.feeds = Feeds(infra.bus, settings.heartbeat_seconds)  # the event streams' share of the bus
        self.config, self.registry = infra.config, infra.registry
        self.sessions, self.coordinator = sessions.service, sessions.coordinator
        self.history, self.compactions = history.service, history.snapshots
        self.diffs, self.reverts, self.shares = history.diffs, history.reverts, history.shares
        self.imports = history.imports
        self.agents, self.permissions, self.questions = agents.agents, agents.permissions, agents.questions
        self.admission, self.waiters = inputs.admission, inputs.waiters
        self.commands = self.turn.commands
        self.terminals = Terminals.build(infra)
        self.integrations = Integrations(self.registry.credentials, self.log)
        self._background: list[asyncio.Task[None]] = []
        # Loading what the default model's first turn needs, on a thread, after start-up.
        self.warming: asyncio.Task[None] | None = None
        self.started_ms = 0

    async def _drain(self, session_id: str, signal: AbortSignal) -> None:
        """The coordinator's drain (the turn domain is built after the coordinator it reports to)."""
        await self.turn.runner.drain(session_id, signal)

    async def start(self) -> None:
        self.started_ms = now_ms()
        await self.db.open()
        await self.log.start()
        with suppress(ConfigError):  # read now so ignored plugins are named at start;
            self.config.load(self.settings.directory)  # a broken file is reported where it is used
            self.warming = asyncio.create_task(asyncio.to_thread(self.registry.first_use(self.settings.directory)))
            self._background.append(self.warming)
        await self._sessions.start(self.infra, self.files.changed_since)
        await self.reverts.recover()  # before serving: no prompt meets a revert a stop interrupted
        handlers = {"permission": self._answer_forwarded_permission, "question": self._answer_forwarded_question}
        self._topology.serve_requests(self._observe_request, handlers)

    def _observe_request(self, event: Event) -> None:
        """A request asked on another process, followed so it is listed and answered here too."""
        self.questions.observe(event)
        self.permissions.observe(event)

    async def _answer_forwarded_permission(self, message: dict[str, Any]) -> None:
        with suppress(PermissionNotFound):
            await self.reply_permission(message["id"], message["reply"], message.get("message"))

    async def _answer_forwarded_question(self, message: dict[str, Any]) -> None:
        with suppress(QuestionNotFound):
            await self.reply_question(message["id"], message.get("answers"))

    async def stop(self) -> None:
        await self.terminals.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._sessions.stop()
        await self.extensions.stop()  # after the drains: a shutdown must not fail calls in flight
        await self.turn.titles.stop()
        await self.turn.runner.pacer.stop()
        await self.workspace.close()
        await self.registry.aclose()
        await self.log.stop()
        await self.db.close()

    def _publish_instance_event(self, event_type: str, properties: dict[str, Any], directory: str) -> None:
        self.log.publish(Event(event_type, properties, None, directory))

    def dispose_instance(self, directory: str) -> None:
        """``POST /instance/dispose``. OpenCode tears the directory's instance down and clients
        re-read what they showed; here configuration, credentials and MCP servers follow their
        files already, so nothing is rebuilt, but clients are told as OpenCode tells them:
        ``server.instance.disposed``, after which the directory's ``/event`` streams end (a
        client reconnects and reads everything again). Turns in flight go on."""
        self._publish_instance_event(INSTANCE_DISPOSED, {"directory": directory}, directory)

    def dispose_all(self) -> None:
        """``POST /global/dispose``: ``global.disposed``, on the streams of every directory."""
        self.log.publish(Event("global.disposed", {}, None, None))

    def publish_tui_event(self, event_type: str, properties: dict[str, Any], directory: str) -> None:
        """A TUI control event (``tui.prompt.append``, ``tui.command.execute``, ...): live only, to
        the TUIs attached to ``directory``, never stored."""
        self._publish_instance_event(event_type, properties, directory)

    def _publish_status(self, session_id: str, status: SessionStatus) -> None:
        """Announce a status change at once (synchronously, so announcements keep their order)."""
        directory = self.sessions.cached_directory(session_id)
        self.log.publish(Event("session.status", {"sessionID": session_id, "status": status}, session_id, directory))
        if status["type"] == "idle":
            self.log.publish(Event("session.idle", {"sessionID": session_id}, session_id, directory))
            self.waiters.settle_session(session_id)

    # -- operations ---------------------------------------------------------------------------

    async def prompt(self, session_id: str, request: PromptRequest, *, resume: bool = True) -> Admitted:
        """Admit, then wake the session's drain (unless ``resume`` is false: a running drain still
        picks the prompt up). Returns once the prompt is durable. The configuration is read once
        for all of it."""
        with reading():
            admitted = await self.admission.admit(session_id, request, reserve=resume)
            directory = self.sessions.cached_directory(session_id)
            if directory is not None:
                self.workspace.watch(directory)
                self.extensions.warm(directory)  # MCP servers connect meanwhile; admission never waits
        if resume and not request.no_reply:
            self.coordinator.wake(session_id)
        return admitted

    async def prompt_and_wait(self, session_id: str, request: PromptRequest) -> MessageWithParts:
        """Admit, wait until this prompt's turn has settled, and return the message that answers
        it (the user message itself for ``noReply``); an aborted turn returns its aborted reply."""
        message_id = (await self.prompt(session_id, request)).message_id
        if request.no_reply:
            return await self.history.get_message(session_id, message_id)
        await self._settled(session_id, message_id)
        if not await self.queries.unsettled_inputs(session_id):
            # The answer is complete; as in OpenCode the call returns once the busy period has
            # ended too, so a follow-up (a shell command, a revert) does not find it busy.
            with suppress(TimeoutError):
                await asyncio.wait_for(self.coordinator.await_idle(session_id), SETTLE_GRACE_SECONDS)
        reply = await self.queries.last_assistant(session_id, parent_id=message_id)
        if reply is None:
            reply = await self.queries.last_assistant(session_id)
        return reply if reply is not None else await self.history.get_message(session_id, message_id)

    async def _settled(self, session_id: str, input_id: str) -> None:
        """Return once input ``input_id`` is settled, or nothing is left to settle it.

        Registered before the input is read: a settle in between still resolves the waiter. An
        idle announcement releases every waiter of the session (an abort), so re-check then: a
        prompt admitted during an abort's clean-up is answered by the drain that follows. Where
        another process may drain the session the input is also re-read on a timer, for as long
        as the topology's ``patience`` says."""
        patience = self._topology.patience
        unowned = 0
        while True:
            waiter = self.waiters.register(session_id, input_id)
            row = await self.queries.input(input_id)
            if row is None or row.completed:
                return
            drained = self.coordinator.is_active(session_id) or await self._topology.leased(session_id)
            unowned = 0 if drained else unowned + 1
            if unowned >= patience.rounds:  # nobody drains it: it will not be answered now
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), patience.seconds)

    async def statuses(self) -> dict[str, SessionStatus]:
        """Every session not idle, wherever in the cluster it runs."""
        return await self._sessions.statuses()

    async def abort(self, session_id: str) -> None:
        """Legacy abort: stop the turn and drop the prompts queued behind it (they stay in the
        history unanswered). When nothing runs OpenCode still announces idle. In a cluster the
        process draining the session does it."""
        if await self._stop(session_id):
            return
        through = await self.log.committed_seq(session_id)
        if await self._topology.forward(session_id, "abort", through=through):
            return
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
        await self._settled(session_id, admitted.message_id)

    async def context(self, session_id: str) -> Window:
        """What the model sees next: the newest snapshot and the messages after it."""
        await self.sessions.get(session_id)
        return await self.compactions.window(session_id)

    async def run(
        self, parent: Session, description: str, prompt: str, agent: str, signal: AbortSignal
    ) -> tuple[Session, str]:
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
        self,
        request_id: str,
        reply: str,
        message: str | None,
        *,
        session_id: str | None = None,
        directory: str | None = None,
    ) -> None:
        """Answer a permission request; PermissionNotFound unless it is pending (in ``session_id``
        and ``directory``, when given). In a cluster the process whose tool waits for it takes
        the answer."""
        info = self.permissions.get(request_id, session_id=session_id, directory=directory)
        if not self.permissions.is_local(request_id):  # asked on another process
            sent = await self._topology.tell(
                info["sessionID"], "permission", id=request_id, reply=reply, message=message
            )
            if not sent:
                # Nobody drains it, or we do and the request is no longer ours to answer (an
                # abort settled it; the relay has not yet told us it was replied).
                raise PermissionNotFound(request_id)
            return
        await self.permissions.reply(
            request_id, reply, message, directory=self.sessions.cached_directory(info["sessionID"])
        )

    async def reply_question(
        self,
        request_id: str,
        answers: list[list[str]] | None,
        *,
        session_id: str | None = None,
        directory: str | None = None,
    ) -> None:
        """Answer a question (``answers``) or dismiss it (``None``), as permission replies are
        answered (the same scoping, the same cluster forwarding)."""
        info = self.questions.get(request_id, session_id=session_id, directory=directory)
        if not self.questions.is_local(request_id):  # asked on another process
            if not await self._topology.tell(info["sessionID"], "question", id=request_id, answers=answers):
                raise QuestionNotFound(request_id)  # nobody waits for it any more
            return
        announced_in = self.sessions.cached_directory(info["sessionID"])
        if answers is None:
            self.questions.reject(request_id, directory=announced_in)
        else:
            self.questions.reply(request_id, answers, directory=announced_in)

    async def interrupt(self, session_id: str) -> None:
        """V2 interrupt: stop the running step; prompts still waiting stay admitted and run at the
        next wake."""
        await self.sessions.get(session_id)
        if not await self.coordinator.interrupt(session_id):
            await self._topology.forward(session_id, "interrupt")

    async def wait_idle(self, session_id: str) -> None:
        """Return once the session is idle here and, in a cluster, on every process."""
        await self.sessions.get(session_id)
        await self.coordinator.await_idle(session_id)
        await self._topology.await_idle(session_id)

    async def switch(
        self, session_id: str, *, agent: str | None = None, model: ModelRef | None = None, variant: str | None = None
    ) -> None:
        """Change the agent or model (and its variant) later prompts use, recorded as a
        ``session.next.*`` event."""
        session = await self.sessions.get(session_id)
        if model is not None:
            self.admission.model_for(session, model)  # unknown models are refused here
        async with self.log.transaction() as tx:

            def change(info: Session) -> None:
                if agent is not None:
                    info["agent"] = agent
                if model is not None:
                    info["model"] = {
                        "id": model.model_id,
                        "providerID": model.provider_id,
                        "variant": variant or "default",
                    }

            info = await self.sessions.mutate(tx, session_id, change)
            kind, value = ("agent.switched", agent) if agent is not None else ("model.switched", info["model"])
            field = "agent" if agent is not None else "model"
            await tx.emit(
                f"session.next.{kind}",
                next_event(session_id, messageID=ids.message_id(), **{field: value}),
                session_id=session_id,
                directory=info["directory"],
            )

    async def session_overview(self, limit: int) -> list[dict[str, Any]]:
        """The most recently updated sessions of every directory with their message counts (the
        command line's list)."""
        infos = await self.sessions.recent(None, limit=limit)
        return [{"info": info, "messages": await self.queries.message_count(info["id"])} for info in infos]

    async def delete_session(self, session_id: str) -> None:
        tree = await self.sessions.subtree(session_id)
        for info in tree:
            await self._stop(info["id"])
        await self.sessions.delete(tree)
