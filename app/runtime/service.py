"""The runtime: the one object that wires the infrastructure and the domains together, and offers
the cross-domain operations protocol translators (legacy, V2) call beyond those of ``Prompting``.
What differs between one process and a cluster is the sessions domain's ``Topology``; the
operations here are written once. No domain is handed the runtime itself."""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import suppress
from typing import Any

from app import ids
from app.clock import now_ms
from app.config import ConfigError
from app.events.feed import Feeds
from app.events.model import Event
from app.observability import metrics, tracing
from app.providers.registry import ModelRef
from app.runtime.abort import AbortSignal
from app.runtime.agents import AgentsDomain
from app.runtime.errors import PermissionNotFound, QuestionNotFound, SessionNotFound, TerminalNotFound
from app.runtime.extensions import Extensions, OneProcess, SharedChanges
from app.runtime.formatters import Formatters
from app.runtime.health import Readiness, readiness
from app.runtime.history import HistoryDomain, Window
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs import InputsDomain
from app.runtime.integrations import Integrations
from app.runtime.lsp import LanguageServers
from app.runtime.payloads import next_event
from app.runtime.prompting import Prompting
from app.runtime.sessions import SessionsDomain
from app.runtime.snapshots import FileSnapshots
from app.runtime.terminals import Terminals
from app.runtime.tools import Skills, ToolServices
from app.runtime.turn import TurnDomain
from app.runtime.usage import By, Report, usage
from app.runtime.workspace import Workspace
from app.runtime.worktrees import Worktrees
from app.settings import Settings
from app.wire import Session, SessionStatus

INSTANCE_DISPOSED = "server.instance.disposed"

log = logging.getLogger("opensession.runtime")


class Runtime:
    """The composition root: builds the infrastructure and each domain from the ones below it,
    and offers the operations the protocol translators call. Routers reach services through the
    names set at the end of ``__init__``; no decision lives in them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        if settings.metrics:
            metrics.enable()
        tracing.configure_from_env()
        self.infra = infra = Infrastructure.create(settings)
        self._sessions = sessions = SessionsDomain.build(infra, self._drain, self._publish_status)
        self._topology = sessions.topology
        self.files = FileSnapshots(
            infra.settings.data_path, infra.config, beside_project=self._topology.snapshots_beside_project
        )
        history = HistoryDomain.build(infra, sessions, self.files)
        agents = AgentsDomain.build(infra, sessions.topology)
        inputs = InputsDomain.build(infra, sessions, history, agents)
        self.workspace = Workspace(
            infra.config, self._publish_instance_event
        )  # files, search and VCS: the routes and the tools share it
        self.skills = Skills(infra.config)
        # What runs after a tool writes a file: formatters, then language servers (per directory).
        self.formatters = Formatters(infra.config)
        self.lsp = LanguageServers(infra.config, self._publish_instance_event)
        # MCP servers, per directory; on a shared database, changed at run time by any process.
        mcp_changes = SharedChanges(infra.db) if infra.db.shared else OneProcess()
        self.extensions = Extensions(infra.config, mcp_changes)
        self.prompting = prompting = Prompting(
            infra.log,
            infra.queries,
            sessions,
            inputs,
            history.service,
            self.workspace,
            self.extensions,
            self._publish_status,
        )
        self.tool_state = ToolServices.build(
            infra.log,
            tasks=prompting,
            workspace=self.workspace,
            skills=self.skills,
            formatters=self.formatters,
            lsp=self.lsp,
        )
        self.turn = TurnDomain.build(
            infra, sessions, inputs, history, agents, self.tool_state, self.extensions, prompter=prompting
        )
        # What the translators call, by name (each owned by its domain).
        self.db, self.bus, self.log, self.queries = infra.db, infra.bus, infra.log, infra.queries
        self.feeds = Feeds(infra.bus, settings.heartbeat_seconds)  # the event streams' share of the bus
        self.config, self.registry = infra.config, infra.registry
        self.sessions, self.coordinator = sessions.service, sessions.coordinator
        self.history, self.summaries = history.service, history.summaries
        self.diffs, self.reverts, self.shares = history.diffs, history.reverts, history.shares
        self.imports = history.imports
        self.agents, self.permissions, self.questions = agents.agents, agents.permissions, agents.questions
        self.admission, self.waiters = inputs.admission, inputs.waiters
        self.commands = self.turn.commands
        self.terminals = Terminals.build(infra)
        self.integrations = Integrations(self.registry.credentials, self.log)
        self.worktrees = Worktrees(settings.data_path, self.sessions, self.log, self._dispose_worktree)
        self._background: list[asyncio.Task[None]] = []
        # Loading what the default model's first turn needs, on a thread, after start-up.
        self.warming: asyncio.Task[None] | None = None
        self.started_ms = 0
        self.ready = False  # start-up, recovery included, has finished (readiness)

    async def _drain(self, session_id: str, signal: AbortSignal) -> None:
        """The coordinator's drain (the turn domain is built after the coordinator it reports to)."""
        await self.turn.runner.drain(session_id, signal)

    async def start(self) -> None:
        self.started_ms = now_ms()
        await self.db.open()
        await self.log.start()  # first: its listening connection holds this process's presence
        await self.registry.credentials.keeper.start()
        with suppress(ConfigError):  # read now so ignored plugins are named at start;
            self.config.load(self.settings.directory)  # a broken file is reported where it is used
            self.warming = asyncio.create_task(asyncio.to_thread(self.registry.first_use(self.settings.directory)))
            self._background.append(self.warming)
        await self._sessions.start(self.infra, self.files.changed_since)
        await self.reverts.recover()  # before serving: no prompt meets a revert a stop interrupted
        await self.terminals.start()
        await self.worktrees.start()
        await self.extensions.start()
        handlers = {"permission": self._answer_forwarded_permission, "question": self._answer_forwarded_question}
        self._topology.serve_requests(self._observe_request, handlers)
        self.ready = True

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

    async def hand_off(self) -> None:
        """The server is stopping (SIGTERM): not ready any more, and the other processes of a
        cluster take this one's sessions over now. Never fails the shutdown."""
        self.ready = False
        try:
            await self._sessions.hand_off()
        except Exception:
            log.exception("could not hand the sessions off; the other processes take them once the leases expire")

    async def stop(self) -> None:
        await self.worktrees.stop()
        self.ready = False
        await self.terminals.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._sessions.stop()
        await self.extensions.stop()  # after the drains: a shutdown must not fail calls in flight
        await self.lsp.stop()
        await self.turn.titles.stop()
        await self.turn.runner.pacer.stop()
        await self.workspace.close()
        await self.registry.aclose()
        await self.registry.credentials.keeper.stop()
        await self.log.stop()
        await self.db.close()
        tracing.shutdown()

    def _publish_instance_event(self, event_type: str, properties: dict[str, Any], directory: str) -> None:
        self.log.publish(Event(event_type, properties, None, directory))

    def dispose_instance(self, directory: str) -> None:
        """``POST /instance/dispose``. OpenCode tears the directory's instance down and clients
        re-read what they showed; here configuration, credentials and MCP servers follow their
        files already, so nothing is rebuilt, but clients are told as OpenCode tells them:
        ``server.instance.disposed``, after which the directory's ``/event`` streams end (a
        client reconnects and reads everything again). Turns in flight go on. The directory's
        language servers end (the next touch starts them again) and its formatters are looked up
        anew."""
        self.lsp.dispose(directory)
        self.formatters.dispose(directory)
        self._publish_instance_event(INSTANCE_DISPOSED, {"directory": directory}, directory)

    async def _dispose_worktree(self, directory: str) -> None:
        """A worktree is about to be removed: its terminals end, its watcher stops, and its
        instance is disposed, as OpenCode disposes it."""
        for terminal in self.terminals.in_directory(directory):
            with suppress(TerminalNotFound):
                await self.terminals.remove(directory, terminal["id"])
        await self.workspace.unwatch(directory)
        self.dispose_instance(directory)

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

    async def statuses(self) -> dict[str, SessionStatus]:
        """Every session not idle, wherever in the cluster it runs."""
        return await self._sessions.statuses()

    async def placed_elsewhere(self, session_id: str) -> str | None:
        """Where a request that works on the session's files is to be served, when not here: the
        URL of another process whose machine has the session's directory, if this one's lacks it
        (processes on machines that do not share the directories). None: serve it here."""
        try:
            directory = (await self.sessions.get(session_id))["directory"]
        except SessionNotFound:
            return None  # the route answers
        return await self.directory_elsewhere(directory)

    async def directory_elsewhere(self, directory: str) -> str | None:
        """The URL of another process whose machine has ``directory``, if this one's lacks it.
        None: serve it here (this machine has it, or no process does)."""
        return None if os.path.isdir(directory) else await self._topology.where(directory)

    async def context(self, session_id: str) -> Window:
        """What the model sees next: the newest snapshot and the messages after it."""
        await self.sessions.get(session_id)
        return await self.summaries.window(session_id)

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

    async def gauges(self) -> metrics.Gauges:
        """What this process has in flight, read at a scrape of ``/metrics``."""
        draining = len(self.coordinator.active())
        return metrics.Gauges(
            busy_sessions=draining,
            queued_inputs=await self.queries.unsettled_input_count(),
            sse_subscribers=self.feeds.streams,
            leases_held=await self._topology.leases_held(draining),
            mcp_servers=self.extensions.connected(),
            language_servers=self.lsp.running(),
        )

    async def readiness(self) -> Readiness:
        return await readiness(self.queries, self.ready)

    async def usage(self, since: int, by: By) -> Report:
        return await usage(self.queries, since, by)

    async def session_overview(self, limit: int) -> list[dict[str, Any]]:
        """The most recently updated sessions of every directory with their message counts (the
        command line's list)."""
        infos = await self.sessions.recent(None, limit=limit)
        return [{"info": info, "messages": await self.queries.message_count(info["id"])} for info in infos]

    async def delete_session(self, session_id: str) -> None:
        tree = await self.sessions.subtree(session_id)
        for info in tree:
            await self.prompting.stop(info["id"])
        await self.sessions.delete(tree)
