"""The history domain as the other domains and the Runtime use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.runtime.history._compaction import Summaries
from app.runtime.history._diffs import SessionDiffs
from app.runtime.history._import import Importer
from app.runtime.history._revert import Reverts
from app.runtime.history._service import History
from app.runtime.history._share import Shares
from app.runtime.infrastructure import Infrastructure
from app.runtime.sessions import SessionsDomain
from app.runtime.snapshots import FileSnapshots


@dataclass(frozen=True, slots=True)
class HistoryDomain:
    service: History
    summaries: Summaries
    diffs: SessionDiffs
    reverts: Reverts
    shares: Shares
    imports: Importer

    @classmethod
    def build(cls, infra: Infrastructure, sessions: SessionsDomain, files: FileSnapshots) -> HistoryDomain:
        history = History(infra.log, infra.queries, sessions.service, sessions.coordinator)
        diffs = SessionDiffs(history, files)
        reverts = Reverts(infra.log, history, diffs)
        sessions.topology.on_takeover(reverts.finish_taken_over)  # a dead process's revert is finished by its successor
        return cls(
            history,
            Summaries(infra.log, infra.queries),
            diffs,
            reverts,
            Shares(infra.log, history),
            Importer(infra.log, sessions.service, history),
        )
