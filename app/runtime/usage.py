"""What the agents spent: tokens and cost totalled from the stored assistant messages
(``opensession usage`` and ``GET /opensession/usage``), grouped by model, directory or day.

Read from what is stored, not from the metrics: a report covers every process of a cluster and
survives restarts, and what a turn records in its message is what the client was shown."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from app.store.queries import Queries, UsageRow

By = Literal["model", "directory", "day"]
GROUPINGS: tuple[str, ...] = get_args(By)


@dataclass(slots=True)
class Total:
    """The sum over the assistant messages of one group."""

    key: str
    messages: int = 0
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add(self, row: UsageRow) -> None:
        self.messages += 1
        self.input += row.input
        self.output += row.output
        self.reasoning += row.reasoning
        self.cache_read += row.cache_read
        self.cache_write += row.cache_write
        self.cost += row.cost


@dataclass(slots=True)
class Report:
    since: int  # ms; 0 for everything stored
    by: By
    groups: list[Total] = field(default_factory=list)
    total: Total = field(default_factory=lambda: Total("total"))

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "by": self.by,
            "groups": [asdict(group) for group in self.groups],
            "total": asdict(self.total),
        }


def _key(row: UsageRow, by: By) -> str:
    if by == "model":
        return f"{row.provider}/{row.model}"
    if by == "directory":
        return row.directory
    return datetime.fromtimestamp(row.time_created / 1000, UTC).date().isoformat()


def report(rows: Iterable[UsageRow], since: int, by: By) -> Report:
    """Totals per group: by cost, highest first (days in order)."""
    result = Report(since, by)
    groups: dict[str, Total] = {}
    for row in rows:
        key = _key(row, by)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Total(key)
        group.add(row)
        result.total.add(row)
    if by == "day":
        result.groups = [groups[key] for key in sorted(groups)]
    else:
        result.groups = sorted(groups.values(), key=lambda g: (-g.cost, -(g.input + g.output), g.key))
    return result


async def usage(queries: Queries, since: int, by: By) -> Report:
    return report(await queries.usage_since(since), since, by)
