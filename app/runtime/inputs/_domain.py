"""The inputs domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.agents import AgentsDomain
from app.runtime.history import HistoryDomain
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs._admission import Admission
from app.runtime.inputs._waiters import InputWaiters
from app.runtime.sessions import SessionsDomain


@dataclass(frozen=True, slots=True)
class InputsDomain:
    admission: Admission
    waiters: InputWaiters

    @classmethod
    def build(
        cls, infra: Infrastructure, sessions: SessionsDomain, history: HistoryDomain, agents: AgentsDomain
    ) -> InputsDomain:
        admission = Admission(
            infra.log, sessions.service, infra.registry, history.service, agents.agents, sessions.topology
        )
        return cls(admission, InputWaiters())
