"""Replaces a session's default title after its first prompt, as OpenCode's hidden title agent
does: with the ``title`` agent's model from opencode.json if set, else the small model of the
turn's provider (``ProviderRegistry.small_model``). Runs beside the turn so it never delays the
answer; a failure keeps the default title.

It starts once the turn's model answered (so the turn's request is the first the provider sees)
and is stored with the end of the step it ran beside when it is ready by then: one commit, not
two, for a model that answers at once. One ready while that step still streams waits for its end
up to ``RIDE_S``, then is stored alone; one ready after the step ended is stored at once."""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from dataclasses import dataclass, field

from app.config import ConfigError
from app.events.log import Unwanted
from app.events.topology import FENCE
from app.providers.base import ChatRequest, ModelInfo, Provider, ProviderError, TextDelta
from app.providers.options import small_options
from app.providers.registry import ModelNotFoundError, ModelRef, ProviderRegistry
from app.runtime.agents import Agents
from app.runtime.sessions import Mutation, SessionService, is_default_title
from app.store.database import WriteScope
from app.wire import Session

log = logging.getLogger("opensession.title")

# How long a title ready before its step ended waits for that end to carry it: a bound on how
# late a long step makes it, not a cost (it is shown from its commit, whichever it is).
RIDE_S = 1.0

TITLE_SYSTEM = (
    "You are a title generator. Reply with a short title (at most 50 characters) for the "
    "conversation that starts with the user's message. Reply with the title only."
)


@dataclass(eq=False, slots=True)
class _Pending:
    """A session's title while it is made. Invariant: ``stored`` only once a commit carrying
    ``title`` is visible to later transactions (it then needs no commit of its own)."""

    title: str | None = None
    step_ended: asyncio.Event = field(default_factory=asyncio.Event)  # its step's end was written
    stored: bool = False


def _renaming(title: str) -> Mutation:
    def rename(info: Session) -> None:
        if is_default_title(info["title"]):
            info["title"] = title

    return rename


class TitleGenerator:
    def __init__(self, sessions: SessionService, registry: ProviderRegistry, agents: Agents) -> None:
        self._sessions = sessions
        self._registry = registry
        self._agents = agents
        # Per session, the title being made: the session's next turns (queued prompts) may end
        # before it is stored, and asking the model for another title each time is wasted work.
        self._pending: dict[str, _Pending] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _model(self, directory: str, turn_model: ModelRef) -> tuple[Provider, ModelInfo]:
        agent = self._agents.all(directory).get("title")
        if agent is not None and agent.model and "/" in agent.model:
            return self._registry.resolve(directory, ModelRef(*agent.model.split("/", 1)))
        return self._registry.small_model(directory, turn_model)

    def schedule(self, session: Session, user_text: str, turn_model: ModelRef) -> None:
        """A title for a session still under its default one, written by the model OpenCode
        would pick for a turn on ``turn_model`` (chosen only when a title is wanted)."""
        if not is_default_title(session["title"]) or not user_text.strip() or session["id"] in self._pending:
            return
        try:
            provider, model = self._model(session["directory"], turn_model)
        except (ModelNotFoundError, ConfigError) as exc:  # opencode.json changed since the turn began
            log.info("no model for the title of %s: %s", session["id"], exc)
            return
        session_id = session["id"]
        pending = self._pending[session_id] = _Pending()
        task = asyncio.create_task(self._generate(session_id, pending, user_text, provider, model))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def with_step_end(self, scope: WriteScope, session_id: str) -> Mutation | None:
        """Called in the transaction that writes the end of a step of ``session_id``: the change
        that stores its title, when one is ready (marked stored once that commits)."""
        pending = self._pending.get(session_id)
        if pending is None:
            return None
        pending.step_ended.set()
        if pending.title is None:
            return None

        def stored() -> None:
            pending.stored = True

        scope.after_commit(stored)
        return _renaming(pending.title)

    async def _generate(
        self, session_id: str, pending: _Pending, user_text: str, provider: Provider, model: ModelInfo
    ) -> None:
        # A title outlives the drain that scheduled it: it writes under no drain lease (a rename
        # is safe whoever drains the session by then).
        FENCE.set(None)
        try:
            title = await self._ask(session_id, user_text, provider, model)
            if not title:
                return
            pending.title = title
            if not pending.step_ended.is_set():
                with suppress(TimeoutError):
                    async with asyncio.timeout(RIDE_S):
                        await pending.step_ended.wait()
            # In the session's turn, after the step's end if it is writing now: not wanted once
            # that stored the title (its failure leaves the title to this transaction).
            await self._sessions.update(session_id, _renaming(title), wanted=lambda: not pending.stored)
        except Unwanted:
            pass
        except Exception:  # the session may have been deleted meanwhile
            log.debug("could not store title for %s", session_id, exc_info=True)
        finally:
            self._pending.pop(session_id, None)

    async def _ask(self, session_id: str, user_text: str, provider: Provider, model: ModelInfo) -> str:
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
            return ""
        return " ".join("".join(chunks).split()).strip().strip('"')[:100]

    async def stop(self) -> None:
        """At shutdown: a title is not worth waiting for (a remote model may take long)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
