"""The sessions domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions._cluster import Cluster
from app.runtime.sessions._coordinator import BUSY, Drain, DrainCoordinator, StatusListener
from app.runtime.sessions._recovery import StepChanges, close_session, recover
from app.runtime.sessions._service import SessionService


@dataclass(frozen=True, slots=True)
class SessionsDomain:
    service: SessionService
    coordinator: DrainCoordinator
    cluster: Cluster | None  # drain ownership across processes, on a shared database

    @classmethod
    def build(cls, infra: Infrastructure, drain: Drain, on_status: StatusListener) -> SessionsDomain:
        """``drain`` runs one session's drain loop (the turn domain's, built later)."""
        service = SessionService(infra.log, infra.queries)
        cluster = Cluster(infra, service) if infra.db.shared else None
        return cls(service, DrainCoordinator(drain, on_status, cluster), cluster)

    async def start(self, infra: Infrastructure, changes: StepChanges | None = None) -> int:
        """Close what the last stop left open (leaving sessions other live processes drain to
        them; ``changes`` gives interrupted steps their patch), wake sessions with unanswered
        prompts, and join the cluster."""
        skip = await self.cluster.others() if self.cluster is not None else set()
        recovered = await recover(infra.log, infra.queries, self.service, self.coordinator, skip=skip, changes=changes)
        if self.cluster is not None:
            await self.cluster.start(self.coordinator, changes)
        return recovered

    async def close_failed(
        self, infra: Infrastructure, session_id: str, answered: list[str], error: dict[str, Any], changes: StepChanges
    ) -> None:
        """Close what a drain of this process left open when it could not record its own end
        (a write refused: the disk was full), settling the inputs it ``answered`` in the same
        transaction, so they are not answered a second time."""
        session = await self.service.get(session_id)
        await close_session(infra.log, infra.queries, session, changes, error=error, settle=answered)

    async def stop(self) -> None:
        await self.coordinator.shutdown()
        if self.cluster is not None:
            await self.cluster.stop()

    async def statuses(self) -> dict[str, dict[str, object]]:
        """Every non-idle session: this process's statuses and, on a shared database, busy for
        every session with a lease (read from the database, so every process answers alike, from
        the admission's commit on; ``Cluster``), but for this process's own holds (a revert),
        which are no work, as on SQLite."""
        statuses: dict[str, dict[str, object]] = {}
        if self.cluster is not None:
            for session_id, owner in (await self.cluster.holders()).items():
                if owner != self.cluster.origin or not self.coordinator.is_held(session_id):
                    statuses[session_id] = dict(BUSY)
        statuses.update(self.coordinator.statuses())
        return statuses
