"""Sessions and what runs in them.

Owns the session service (create, read, mutate, delete, list), project identity, the drain
coordinator (at most one drain per session; wake / pending wake / interrupt / hold; the status
map), start-up recovery of whatever a stop left open, the rule that closes a reply nothing
will finish (recovery, and history copied mid-turn), and the topology: one process
(``LocalTopology``) or several sharing a PostgreSQL database (``ClusterTopology``: drain leases,
fencing, control messages, takeover), chosen once from the database and used through
``Topology`` by every domain.

May import: the runtime kernel, events, store. It is the lowest domain: every other one may use it.
Invariants: status changes only in the coordinator and is announced synchronously, so
``active()`` and ``statuses()`` always agree; on a shared database a session is busy on every
process while it has a lease, reserved in the transaction that admits its prompt and given up
before idle is announced; recovery derives what to close from what is open.
"""

from app.runtime.sessions._closing import OPEN_REPLY_HINT, OPEN_TOOL_HINTS, closed_part, closed_reply, open_reply
from app.runtime.sessions._cluster import ClusterTopology
from app.runtime.sessions._coordinator import BUSY, DrainCoordinator, Lease
from app.runtime.sessions._domain import SessionsDomain
from app.runtime.sessions._project import cached_project_id, project_id, project_info
from app.runtime.sessions._service import Mutation, SessionService, is_default_title, zero_tokens
from app.runtime.sessions._topology import LocalTopology, Memo, Topology

__all__ = [
    "BUSY",
    "OPEN_REPLY_HINT",
    "OPEN_TOOL_HINTS",
    "ClusterTopology",
    "DrainCoordinator",
    "Lease",
    "LocalTopology",
    "Memo",
    "Mutation",
    "SessionService",
    "SessionsDomain",
    "Topology",
    "cached_project_id",
    "closed_part",
    "closed_reply",
    "is_default_title",
    "open_reply",
    "project_id",
    "project_info",
    "zero_tokens",
]
