"""The recording interface the domains call, and which implementation is behind it.

``RECORDER`` is a no-op until ``enable()`` puts the Prometheus recorder (``_prometheus``) in its
place: with metrics off a call costs one method call and imports nothing. A call site reads
``metrics.RECORDER`` when it records (not at import), so enabling takes effect everywhere.

What is live (busy sessions, queued prompts, subscribers, leases, MCP servers) is not kept as
gauges on the hot path: the runtime reads it when ``/metrics`` is scraped (``Gauges``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Usage:
    """One model step's tokens and cost (what the assistant message records)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Gauges:
    """What this process has in flight at the moment of a scrape."""

    busy_sessions: int = 0
    queued_inputs: int = 0
    sse_subscribers: int = 0
    leases_held: int = 0
    mcp_servers: dict[str, int] = field(default_factory=dict)  # transport -> connected servers
    language_servers: int = 0  # running processes


class Recorder:
    """Metrics off: every record is dropped. The Prometheus recorder overrides each method."""

    enabled = False

    def turn_started(self, provider: str, model: str) -> None:
        """A turn's first step began (its model is resolved)."""

    def turn_ended(self, provider: str, model: str, seconds: float, error: str | None) -> None:
        """A turn ended: finished (``error`` None) or failed with the named error."""

    def first_token(self, provider: str, model: str, seconds: float) -> None:
        """The first streamed event of a turn, ``seconds`` after the turn began."""

    def model_usage(self, provider: str, model: str, usage: Usage) -> None:
        """A model step's tokens and cost."""

    def tool_call(self, tool: str, outcome: str) -> None:
        """A tool call ended: ``ok``, ``failed``, ``blocked`` or ``aborted``."""

    def admission(self, seconds: float) -> None:
        """A prompt was admitted (durable) after ``seconds``."""

    def permission_wait(self, reply: str, seconds: float) -> None:
        """A permission request waited ``seconds`` for ``reply`` (once, always, reject)."""

    def subscriber_overflow(self, kind: str) -> None:
        """A live subscriber fell too far behind and was cut off (``stream``, ``bus``)."""

    def transaction(self, lock_wait: float, seconds: float) -> None:
        """A write transaction waited ``lock_wait`` for the writer and took ``seconds`` in all."""

    def takeover(self) -> None:
        """This process took a session over from a dead one (a cluster)."""

    def render(self, gauges: Gauges) -> tuple[bytes, str]:
        """The exposition of every metric and ``gauges``: body and content type."""
        raise RuntimeError("metrics are off")


RECORDER: Recorder = Recorder()


def enable() -> Recorder:
    """Switch metrics on for this process (idempotent); imports ``prometheus_client``."""
    global RECORDER
    if not RECORDER.enabled:
        from app.observability._prometheus import PrometheusRecorder

        RECORDER = PrometheusRecorder()
    return RECORDER
