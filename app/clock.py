"""Wall-clock helpers: every timestamp on the wire is integer milliseconds since the epoch."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_from_ms(ms: int) -> str:
    """ISO-8601 with millisecond precision and a ``Z`` suffix, as JavaScript's toISOString()."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
