"""The sessions domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions._coordinator import Drain, DrainCoordinator, StatusListener
from app.runtime.sessions._recovery import recover
from app.runtime.sessions._service import SessionService


@dataclass(frozen=True, slots=True)
class SessionsDomain:
    service: SessionService
    coordinator: DrainCoordinator

    @classmethod
    def build(cls, infra: Infrastructure, drain: Drain, on_status: StatusListener) -> SessionsDomain:
        """``drain`` runs one session's drain loop (the turn domain's, built later)."""
        return cls(SessionService(infra.log, infra.queries), DrainCoordinator(drain, on_status))

    async def recover(self, infra: Infrastructure) -> int:
        """At start-up: close what the last stop left open and wake sessions with unanswered prompts."""
        return await recover(infra.log, infra.queries, self.service, self.coordinator)
