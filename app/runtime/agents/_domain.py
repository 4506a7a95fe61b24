"""The agents domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.agents._definitions import Agents
from app.runtime.agents._permissions import Permissions
from app.runtime.agents._questions import Questions
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions import Topology


@dataclass(frozen=True, slots=True)
class AgentsDomain:
    agents: Agents
    permissions: Permissions
    questions: Questions

    @classmethod
    def build(cls, infra: Infrastructure, topology: Topology) -> AgentsDomain:
        agents = Agents(infra.config)
        return cls(agents, Permissions(infra.log, infra.config, agents, topology.memo()), Questions(infra.log))
