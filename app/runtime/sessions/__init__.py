"""Sessions and what runs in them.

Owns the session service (create, read, mutate, delete, list), project identity, the drain
coordinator (at most one drain per session; wake / pending wake / interrupt / hold; the status
map) and start-up recovery of whatever a stop left open.

May import: the runtime kernel, events, store. It is the lowest domain: every other one may use it.
Invariants: status changes only in the coordinator and is announced synchronously, so
``active()`` and ``statuses()`` always agree; recovery derives what to close from what is open.
"""

from app.runtime.sessions._cluster import Cluster
from app.runtime.sessions._coordinator import BUSY, DrainCoordinator
from app.runtime.sessions._domain import SessionsDomain
from app.runtime.sessions._project import cached_project_id, project_id, project_info
from app.runtime.sessions._service import SessionService, is_default_title, zero_tokens

__all__ = [
    "BUSY",
    "Cluster",
    "DrainCoordinator",
    "SessionService",
    "SessionsDomain",
    "cached_project_id",
    "is_default_title",
    "project_id",
    "project_info",
    "zero_tokens",
]
