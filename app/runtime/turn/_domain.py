"""The turn domain as the Runtime uses it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.agents import AgentsDomain
from app.runtime.extensions import Extensions
from app.runtime.history import HistoryDomain
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs import InputsDomain
from app.runtime.sessions import SessionsDomain
from app.runtime.tools import ToolServices
from app.runtime.turn._commands import Commands, Prompter
from app.runtime.turn._runner import Runner
from app.runtime.turn._title import TitleGenerator
from app.runtime.turn._toolcalls import ToolCalls


@dataclass(frozen=True, slots=True)
class TurnDomain:
    runner: Runner
    commands: Commands
    titles: TitleGenerator

    @classmethod
    def build(
        cls,
        infra: Infrastructure,
        sessions: SessionsDomain,
        inputs: InputsDomain,
        history: HistoryDomain,
        agents: AgentsDomain,
        tools: ToolServices,
        extensions: Extensions,
        prompter: Prompter,
    ) -> TurnDomain:
        titles = TitleGenerator(sessions.service, infra.registry, agents.agents)
        toolcalls = ToolCalls(agents.permissions, agents.questions, tools, extensions)
        runner = Runner(infra, sessions, inputs, history, toolcalls, titles)
        return cls(runner, Commands(infra, sessions, inputs, history, tools, prompter, extensions), titles)
