"""The runtime: one object that wires storage, the event log, providers, the coordinator and the
runner, and offers the operations every protocol translator (legacy, V2) calls."""

from __future__ import annotations

from typing import Any

from app.config import ConfigLoader
from app.events.bus import EventBus
from app.events.log import EventLog
from app.providers.registry import ProviderRegistry
from app.runtime.admission import Admission, PromptRequest
from app.runtime.coordinator import DrainCoordinator
from app.runtime.errors import MessageNotFound
from app.runtime.recovery import recover
from app.runtime.runner import Runner
from app.runtime.sessions import SessionService
from app.runtime.title import TitleGenerator
from app.runtime.waiters import InputWaiters
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
        self.runner = Runner(
            self.log, self.queries, self.sessions, self.registry, self.titles, self.waiters, settings.part_flush_seconds
        )
        self.coordinator = DrainCoordinator(self.runner.drain, self._publish_status)
        self.runner.coordinator = self.coordinator
        self.admission = Admission(self.log, self.sessions, self.registry)

    async def start(self) -> None:
        await self.db.open()
        await self.log.start()
        await recover(self.log, self.queries, self.coordinator)

    async def stop(self) -> None:
        await self.coordinator.shutdown()
        await self.titles.drain()
        await self.registry.aclose()
        await self.db.close()

    async def _publish_status(self, session_id: str, status: dict[str, Any]) -> None:
        directory = await self._directory_or_none(session_id)
        self.log.publish(
            "session.status", {"sessionID": session_id, "status": status}, session_id=session_id, directory=directory
        )
        if status["type"] == "idle":
            self.log.publish("session.idle", {"sessionID": session_id}, session_id=session_id, directory=directory)
            self.waiters.settle_session(session_id)

    async def _directory_or_none(self, session_id: str) -> str | None:
        try:
            return await self.sessions.directory_of(session_id)
        except LookupError:
            return None
        except Exception:
            return None

    # -- operations ---------------------------------------------------------------------------

    async def prompt(self, session_id: str, request: PromptRequest) -> str:
        """Admit and wake; returns the user message id once the prompt is durable."""
        admitted = await self.admission.admit(session_id, request)
        if not request.no_reply:
            self.coordinator.wake(session_id)
        return admitted.message_id

    async def prompt_and_wait(self, session_id: str, request: PromptRequest) -> MessageWithParts:
        """Admit, wait until this prompt's turn has settled, and return the message that answers
        it (the user message itself for ``noReply``); an aborted turn returns its aborted reply."""
        message_id = await self.prompt(session_id, request)
        if request.no_reply:
            return await self.message(session_id, message_id)
        # No await since the wake: the drain cannot have settled this input before we register.
        waiter = self.waiters.register(session_id, message_id)
        row = await self.queries.input(message_id)
        if row is not None and not row.completed and self.coordinator.is_active(session_id):
            await waiter
        reply = await self.queries.last_assistant(session_id, parent_id=message_id)
        if reply is None:
            reply = await self.queries.last_assistant(session_id)
        return reply if reply is not None else await self.message(session_id, message_id)

    async def message(self, session_id: str, message_id: str) -> MessageWithParts:
        await self.sessions.get(session_id)
        found = await self.queries.message(session_id, message_id)
        if found is None:
            raise MessageNotFound(session_id, message_id)
        return found

    async def abort(self, session_id: str) -> None:
        """Stop the session's turn; when nothing runs OpenCode still announces idle."""
        if not await self.coordinator.interrupt(session_id):
            directory = await self._directory_or_none(session_id)
            if directory is not None:
                await self._publish_status(session_id, {"type": "idle"})

    async def delete_session(self, session_id: str) -> None:
        tree = await self.sessions.subtree(session_id)
        for info in tree:
            await self.coordinator.interrupt(info["id"])
        await self.sessions.delete(tree)
