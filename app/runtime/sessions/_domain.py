"""The sessions domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions._cluster import ClusterTopology
from app.runtime.sessions._coordinator import Drain, DrainCoordinator, StatusListener
from app.runtime.sessions._recovery import StepChanges, close_session, recover
from app.runtime.sessions._service import SessionService
from app.runtime.sessions._topology import LocalTopology, Topology
from app.wire import SessionStatus


@dataclass(frozen=True, slots=True)
class SessionsDomain:
    service: SessionService
    coordinator: DrainCoordinator
    topology: Topology  # one process, or several sharing the database

    @classmethod
    def build(cls, infra: Infrastructure, drain: Drain, on_status: StatusListener) -> SessionsDomain:
        """``drain`` runs one session's drain loop (the turn domain's, built later). The topology
        is chosen here, once, from the database: one other processes may write to is a cluster."""
        service = SessionService(infra.log, infra.queries)
        topology: Topology = ClusterTopology(infra, service) if infra.db.shared else LocalTopology()
        return cls(service, DrainCoordinator(drain, on_status, topology), topology)

    async def start(self, infra: Infrastructure, changes: StepChanges | None = None) -> int:
        """Close what the last stop left open (leaving sessions another process holds a lease
        on to it, or to a takeover; ``changes`` gives interrupted steps their patch), wake
        sessions with unanswered prompts, and join the topology."""
        skip = await self.topology.leased_elsewhere()
        recovered = await recover(
            infra.log,
            infra.queries,
            self.service,
            self.coordinator,
            skip=skip,
            drains_under=self.topology.drains_under,
            changes=changes,
        )
        await self.topology.start(self.coordinator, changes)
        return recovered

    async def close_failed(
        self, infra: Infrastructure, session_id: str, answered: list[str], error: dict[str, Any], changes: StepChanges
    ) -> None:
        """Close what a drain of this process left open when it could not record its own end
        (a write refused: the disk was full), settling the inputs it ``answered`` in the same
        transaction, so they are not answered a second time."""
        session = await self.service.get(session_id)
        await close_session(infra.log, infra.queries, session, changes, error=error, settle=answered)

    async def hand_off(self) -> None:
        """SIGTERM: the other processes (if any) take this one's sessions over now."""
        await self.topology.hand_off(self.coordinator.shutdown)

    async def stop(self) -> None:
        await self.coordinator.shutdown()
        await self.topology.stop()

    async def statuses(self) -> dict[str, SessionStatus]:
        """Every non-idle session: this process's statuses and busy for every session the
        topology reads busy by its lease (on a shared database, from the admission's commit on)."""
        statuses: dict[str, SessionStatus] = {
            sid: {"type": "busy"} for sid in await self.topology.reserved(self.coordinator.is_held)
        }
        statuses.update(self.coordinator.statuses())
        return statuses
