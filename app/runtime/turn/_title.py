"""Replaces a session's default title after its first prompt, as OpenCode's hidden title agent
does: with the ``title`` agent's model from opencode.json if set, else the small model of the
turn's provider (``ProviderRegistry.small_model``). Runs beside the turn so it never delays the
answer; a failure keeps the default title."""

from __future__ import annotations

import asyncio
import logging

from app.config import ConfigError
from app.events.topology import FENCE
from app.providers.base import ChatRequest, ModelInfo, Provider, ProviderError, TextDelta
from app.providers.options import small_options
from app.providers.registry import ModelNotFoundError, ModelRef, ProviderRegistry
from app.runtime.agents import Agents
from app.runtime.sessions import SessionService, is_default_title
from app.wire import Session

log = logging.getLogger("opensession.title")

TITLE_SYSTEM = (
    "You are a title generator. Reply with a short title (at most 50 characters) for the "
    "conversation that starts with the user's message. Reply with the title only."
)


class TitleGenerator:
    def __init__(self, sessions: SessionService, registry: ProviderRegistry, agents: Agents) -> None:
        self._sessions = sessions
        self._registry = registry
        self._agents = agents
        # Per session, the title being generated: the session's next turns (queued prompts) end
        # before it is stored, and asking the model for another title each time is wasted work.
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _model(self, directory: str, turn_model: ModelRef) -> tuple[Provider, ModelInfo]:
        agent = self._agents.all(directory).get("title")
        if agent is not None and agent.model and "/" in agent.model:
            return self._registry.resolve(directory, ModelRef(*agent.model.split("/", 1)))
        return self._registry.small_model(directory, turn_model)

    def schedule(self, session: Session, user_text: str, turn_model: ModelRef) -> None:
        """A title for a session still under its default one, written by the model OpenCode
        would pick for a turn on ``turn_model`` (chosen only when a title is wanted)."""
        if not is_default_title(session["title"]) or not user_text.strip() or session["id"] in self._tasks:
            return
        try:
            provider, model = self._model(session["directory"], turn_model)
        except (ModelNotFoundError, ConfigError) as exc:  # opencode.json changed since the turn began
            log.info("no model for the title of %s: %s", session["id"], exc)
            return
        session_id = session["id"]
        task = self._tasks[session_id] = asyncio.create_task(self._generate(session_id, user_text, provider, model))
        task.add_done_callback(lambda _task: self._tasks.pop(session_id, None))

    async def _generate(self, session_id: str, user_text: str, provider: Provider, model: ModelInfo) -> None:
        # A title outlives the drain that scheduled it: it writes under no drain lease (a rename
        # is safe whoever drains the session by then).
        FENCE.set(None)
        request = ChatRequest(
            model=model,
            system=[TITLE_SYSTEM],
            messages=[{"role": "user", "content": user_text}],
            session_id=session_id,
            # A reasoning model spends output tokens on reasoning first: no cap that small for it.
            max_tokens=None if model.reasoning else 64,
            options=small_options(model),
        )
        try:
            chunks = [event.text async for event in provider.stream(request) if isinstance(event, TextDelta)]
        except ProviderError as exc:
            log.info("title generation failed for %s: %s", session_id, exc.message)
            return
        title = " ".join("".join(chunks).split()).strip().strip('"')[:100]
        if not title:
            return

        def rename(info: Session) -> None:
            if is_default_title(info["title"]):
                info["title"] = title

        try:
            await self._sessions.update(session_id, rename)
        except Exception:  # the session may have been deleted meanwhile
            log.debug("could not store title for %s", session_id, exc_info=True)

    async def stop(self) -> None:
        """At shutdown: a title is not worth waiting for (a remote model may take long)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
