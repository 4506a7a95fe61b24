"""The two kinds of step a turn runs. The runner plans a step, streams it and finishes it the same
way for both (``_runner``); what differs between them is here:

- a **model step** answers a prompt with the session's history, may call tools, asks for a
  title once its model answered (stored with its end when ready by then), and afterwards, when
  the context overflows, admits an automatic compaction;
- a **compaction step** summarizes the history before its request into a snapshot (it reads that
  window before its own reply exists), is offered no tools, and announces its start and end.

Each kind is made once per runner with the services it needs, and is stateless across steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.config import ConfigLoader
from app.events.log import Transaction
from app.events.model import Event
from app.providers.base import ChatRequest, ModelInfo
from app.providers.registry import ModelRef
from app.runtime.agents import Rule
from app.runtime.history import (
    SUMMARY_INSTRUCTION,
    SUMMARY_SYSTEM,
    HistoryDomain,
    Summary,
    Window,
    model_messages,
    overflows,
    system_prompts,
    transcript,
)
from app.runtime.inputs import InputsDomain, StoredPrompt, compaction_request
from app.runtime.payloads import next_event
from app.runtime.sessions import Mutation
from app.runtime.tools import TOOLS, available_text, function_specs, offered_for
from app.runtime.turn._recorder import AssistantRecorder
from app.runtime.turn._title import TitleGenerator
from app.runtime.turn._toolcalls import ToolCalls
from app.store.queries import InputRow, Queries
from app.wire import AssistantMessage, Session


@dataclass(slots=True)
class StepPlan:
    """What a step answers and with which model, decided before anything is written."""

    session: Session
    answered: InputRow  # the input whose prompt the step answers (a continuation: the turn's)
    prompt: StoredPrompt  # that input's stored prompt
    ref: ModelRef
    variant: str | None
    agent: str
    info: AssistantMessage  # the assistant message the step writes
    # The history read before the step's reply exists: a compaction's, and a model step's when it
    # was read with the step's work (None: read when the request is made).
    window: Window | None = None
    summary: Summary | None = None  # what a compaction stored
    # The inputs the step promotes: in its request though its opening may not be stored yet.
    entering: frozenset[str] = frozenset()

    @property
    def session_id(self) -> str:
        return str(self.session["id"])

    @property
    def directory(self) -> str:
        return str(self.session["directory"])


def _first_user_text(request: ChatRequest) -> str:
    for message in request.messages:
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
    return ""


class StepKind(Protocol):
    # Whether the step's opening is committed before its request is made (else with its first
    # write: ``AssistantRecorder.open_later``).
    opens_at_once: bool

    def agent(self, prompt: StoredPrompt) -> str: ...

    async def prepare(self, plan: StepPlan) -> None:
        """Before the step's reply is opened."""

    async def opened(self, tx: Transaction, plan: StepPlan) -> None:
        """In the transaction that opens the reply."""

    async def request(
        self, plan: StepPlan, model: ModelInfo, tuning: dict[str, Any], last_step: bool
    ) -> ChatRequest: ...

    def answering(self, plan: StepPlan, request: ChatRequest) -> None:
        """Once the model's first event came (the provider took the step's request)."""

    async def streamed(self, plan: StepPlan, recorder: AssistantRecorder) -> None:
        """After the model's stream ended, before its tool calls run."""

    def ending(self, tx: Transaction, plan: StepPlan) -> Mutation | None:
        """In the transaction that finishes the step: a change to the session's info, made with
        the step's usage (one update of the session, not two)."""

    async def closed(self, tx: Transaction, plan: StepPlan) -> None:
        """In the transaction that finishes the step, after the session's update."""

    async def after(self, plan: StepPlan, usage: dict[str, Any], model: ModelInfo) -> None:
        """Once the step is committed."""


@dataclass(slots=True)
class ModelStep:
    history: HistoryDomain
    toolcalls: ToolCalls
    inputs: InputsDomain
    titles: TitleGenerator
    config: ConfigLoader
    opens_at_once = False  # its request reads the window, not its own opening

    def agent(self, prompt: StoredPrompt) -> str:
        return prompt.agent or "build"

    async def prepare(self, plan: StepPlan) -> None:
        return None

    async def opened(self, tx: Transaction, plan: StepPlan) -> None:
        return None

    async def request(self, plan: StepPlan, model: ModelInfo, tuning: dict[str, Any], last_step: bool) -> ChatRequest:
        """The session's history after its newest snapshot's summary, with the agent's tools (none
        on a turn's last step, so a runaway tool loop ends)."""
        context = plan.window if plan.window is not None else await self.history.summaries.window(plan.session_id)
        tail = [m for m in context.tail if m["info"]["id"] != plan.info["id"]]
        summary = context.summary.text if context.summary else None
        tools, skills = (None, []) if last_step else await self._offered(plan.session, plan.agent, model)
        agent_prompt = self.inputs.admission.agents.get(plan.directory, plan.agent).prompt
        system = system_prompts(plan.directory, plan.prompt.system, summary, agent_prompt)
        return ChatRequest(
            model=model,
            system=system + skills,
            # Prompts admitted but still waiting (read with the window) are not shown to the model yet.
            messages=await model_messages(tail, context.waiting - plan.entering, model, plan.directory),
            session_id=plan.session_id,
            tools=tools,
            **tuning,
        )

    def answering(self, plan: StepPlan, request: ChatRequest) -> None:
        self.titles.schedule(plan.session, _first_user_text(request), plan.ref)

    async def streamed(self, plan: StepPlan, recorder: AssistantRecorder) -> None:
        return None

    def ending(self, tx: Transaction, plan: StepPlan) -> Mutation | None:
        return self.titles.with_step_end(tx.scope, plan.session_id)

    async def closed(self, tx: Transaction, plan: StepPlan) -> None:
        return None

    async def after(self, plan: StepPlan, usage: dict[str, Any], model: ModelInfo) -> None:
        if self._auto_compaction(plan.directory) and overflows(usage["tokens"], model):
            await self.inputs.admission.admit(plan.session_id, compaction_request("auto", plan.ref, plan.variant))

    def _auto_compaction(self, directory: str) -> bool:
        return self.config.load(directory).auto_compaction

    async def _offered(
        self, session: Session, agent: str, model: ModelInfo
    ) -> tuple[list[dict[str, Any]] | None, list[str]]:
        """The tools offered to ``model`` and the system prompt listing the skills, under the
        agent's permission rules (read once for both)."""
        rules = await self.toolcalls.permissions.rules_for(session, agent)
        tools = await self._tool_specs(session, rules, model)
        return tools, self._skills_prompt(session, rules, tools)

    async def _tool_specs(self, session: Session, rules: list[Rule], model: ModelInfo) -> list[dict[str, Any]] | None:
        """The built-in tools ``model`` is offered, then the MCP servers' (waiting for servers
        still connecting)."""
        offered = offered_for(model.model_id, model.provider_id, self.toolcalls.services.settings)
        mcp = {n: t for n, t in (await self.toolcalls.extensions.tools(session["directory"])).items() if n not in TOOLS}
        disabled = self.toolcalls.permissions.disabled_tools(rules, [*offered, *mcp])
        names = [name for name in offered if name not in disabled]
        specs = function_specs(names) + [tool.function_spec for name, tool in mcp.items() if name not in disabled]
        return specs or None

    def _skills_prompt(self, session: Session, rules: list[Rule], tools: list[dict[str, Any]] | None) -> list[str]:
        """OpenCode lists the skills an agent may load in the system prompt, when it offers ``skill``
        (with none to load, nothing is added: the request stays as it was without skills)."""
        skills = self.toolcalls.services.skills
        if skills is None or not any(t["function"]["name"] == "skill" for t in tools or []):
            return []
        found = skills.all(session["directory"])
        denied = self.toolcalls.permissions.denied(rules, "skill", [s.name for s in found])
        allowed = [s for s in found if s.name not in denied]
        if not allowed:
            return []
        listing = available_text(allowed)
        return [
            "Skills provide specialized instructions and workflows for specific tasks.\n"
            f"Use the skill tool to load a skill when a task matches its description.\n{listing}"
        ]


@dataclass(slots=True)
class CompactionStep:
    history: HistoryDomain
    queries: Queries
    opens_at_once = True  # announced as started before the summary is asked for

    def agent(self, prompt: StoredPrompt) -> str:
        return "compaction"

    async def prepare(self, plan: StepPlan) -> None:
        """Its window is what came before its request: read before its own reply exists (with
        the step's work, unless that read had none)."""
        plan.info["summary"] = True
        if plan.window is None:
            plan.window = await self.history.summaries.window(plan.session_id)

    async def opened(self, tx: Transaction, plan: StepPlan) -> None:
        await tx.emit(
            "session.next.compaction.started",
            next_event(plan.session_id, messageID=plan.answered.id, reason=self._reason(plan)),
            session_id=plan.session_id,
            directory=plan.directory,
        )

    async def request(self, plan: StepPlan, model: ModelInfo, tuning: dict[str, Any], last_step: bool) -> ChatRequest:
        assert plan.window is not None, "prepared"
        return ChatRequest(
            model=model,
            system=[SUMMARY_SYSTEM],
            session_id=plan.session_id,
            messages=[{"role": "user", "content": f"{transcript(plan.window)}\n\n{SUMMARY_INSTRUCTION}"}],
            **tuning,
        )

    def answering(self, plan: StepPlan, request: ChatRequest) -> None:
        return None

    async def streamed(self, plan: StepPlan, recorder: AssistantRecorder) -> None:
        """Record the streamed summary as the session's newest snapshot, covering the window."""
        window = plan.window
        assert window is not None, "prepared"
        covered = window.tail[-1]["info"]["id"] if window.tail else None
        through = await self.queries.message_seq(plan.session_id, covered) if covered else None
        if through is None:
            through = window.summary.through_seq if window.summary else -1
        plan.summary = await self.history.summaries.write(
            plan.session_id,
            replaces=window.version,
            through_seq=through,
            message_id=recorder.info["id"],
            reason=self._reason(plan),
            summary=recorder.text(),
        )

    def ending(self, tx: Transaction, plan: StepPlan) -> Mutation | None:
        return None

    async def closed(self, tx: Transaction, plan: StepPlan) -> None:
        if plan.summary is None:  # the step failed before its summary was stored
            return
        await tx.emit(
            "session.next.compaction.ended",
            next_event(
                plan.session_id,
                messageID=plan.answered.id,
                reason=self._reason(plan),
                text=plan.summary.text,
                recent="",
            ),
            session_id=plan.session_id,
            directory=plan.directory,
        )
        tx.publish(Event("session.compacted", {"sessionID": plan.session_id}, plan.session_id, plan.directory))

    async def after(self, plan: StepPlan, usage: dict[str, Any], model: ModelInfo) -> None:
        return None

    @staticmethod
    def _reason(plan: StepPlan) -> str:
        assert plan.prompt.compaction is not None  # the runner plans this kind only for those
        return plan.prompt.compaction
