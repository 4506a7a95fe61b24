"""The agents domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.agents._definitions import Agents
from app.runtime.agents._permissions import Permissions
from app.runtime.agents._questions import Questions
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions import Topology

SAVED_PERMISSIONS = "saved-permissions"  # the topology's cache of each project's "always" answers


@dataclass(frozen=True, slots=True)
class AgentsDomain:
    agents: Agents
    permissions: Permissions
    questions: Questions

    @classmethod
    def build(cls, infra: Infrastructure, topology: Topology) -> AgentsDomain:
        agents = Agents(infra.config)
        saved = topology.memo(SAVED_PERMISSIONS)
        permissions = Permissions(infra.log, infra.config, agents, saved, lambda: topology.changed(SAVED_PERMISSIONS))
        return cls(agents, permissions, Questions(infra.log))
