"""Liveness and readiness for a load balancer or Kubernetes (``/healthz``, ``/readyz``).

Live: the process answers. Ready: start-up (migrations, recovery of what the last stop left open,
an interrupted revert) has finished and the database answers a round trip within
``PING_SECONDS``. OpenCode's ``/global/health`` keeps its own answer; these are beside it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.store.queries import Queries

PING_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    started: bool  # start-up (recovery included) has finished
    database: str  # "ok", or why it did not answer

    def as_json(self) -> dict[str, object]:
        return {"ready": self.ready, "started": self.started, "database": self.database}


async def readiness(queries: Queries, started: bool) -> Readiness:
    try:
        async with asyncio.timeout(PING_SECONDS):
            await queries.ping()
    except Exception as exc:  # any failure to answer means: send no traffic here
        reason = str(exc) or type(exc).__name__
        return Readiness(False, started, reason.splitlines()[0][:300])
    return Readiness(started, started, "ok")
