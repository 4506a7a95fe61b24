"""The history domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.history._compaction import Snapshots
from app.runtime.history._revert import Reverts
from app.runtime.history._service import History
from app.runtime.history._share import Shares
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions import SessionsDomain


@dataclass(frozen=True, slots=True)
class HistoryDomain:
    service: History
    snapshots: Snapshots
    reverts: Reverts
    shares: Shares

    @classmethod
    def build(cls, infra: Infrastructure, sessions: SessionsDomain) -> HistoryDomain:
        history = History(infra.log, infra.queries, sessions.service, sessions.coordinator)
        return cls(
            history, Snapshots(infra.log, infra.queries), Reverts(infra.log, history), Shares(infra.log, history)
        )
