"""The Prometheus recorder: the metric objects, their bounded labels, and the exposition.

Labels are bounded: a label takes at most ``DISTINCT`` values per process (further ones are
counted as ``other``) and no value longer than ``LONGEST``, so a model name a client sends, or an
MCP server with hundreds of tools, cannot grow the series without end. No session, message or
request id is ever a label.

Several workers on one machine (``PROMETHEUS_MULTIPROC_DIR`` set before the server starts, as
``prometheus_client`` documents): counters and histograms are kept in that directory's files and
every worker's are summed in each scrape; what is live (``Gauges``) is the scraped worker's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from app.observability.metrics import Gauges, Recorder, Usage

DISTINCT = 100
LONGEST = 120
OTHER = "other"

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)  # turns, first tokens
QUICK = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)  # admissions, writes
WAITS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600)  # a person answering a permission request


class _Bounded:
    """One label's values: kept as given up to ``DISTINCT`` of them, then ``other``."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        value = value[:LONGEST]
        if value not in self._seen:
            if len(self._seen) >= DISTINCT:
                return OTHER
            self._seen.add(value)
        return value


class _Live:
    """What the runtime read at this scrape, as gauges."""

    def __init__(self, gauges: Gauges) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        g = self.gauges
        for name, text, value in (
            ("opensession_busy_sessions", "Sessions this process is draining now", g.busy_sessions),
            ("opensession_queued_inputs", "Prompts admitted and not yet answered (every process)", g.queued_inputs),
            ("opensession_sse_subscribers", "Event streams open on this process", g.sse_subscribers),
            ("opensession_leases_held", "Drain leases this process holds", g.leases_held),
            ("opensession_language_servers", "Language server processes running", g.language_servers),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        servers = GaugeMetricFamily("opensession_mcp_servers", "Connected MCP servers", labels=["transport"])
        for transport in ("local", "remote"):
            servers.add_metric([transport], g.mcp_servers.get(transport, 0))
        yield servers


class PrometheusRecorder(Recorder):
    enabled = True

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = registry = CollectorRegistry()
        if not self.multiprocess:
            ProcessCollector(registry=registry)
        by_model = ["provider", "model"]
        self._started = Counter("opensession_turns_started", "Turns started", by_model, registry=registry)
        self._finished = Counter("opensession_turns_finished", "Turns finished", by_model, registry=registry)
        self._failed = Counter(
            "opensession_turns_failed", "Turns ended by an error", [*by_model, "error"], registry=registry
        )
        self._turn_seconds = Histogram(
            "opensession_turn_seconds", "Turn duration", by_model, buckets=SECONDS, registry=registry
        )
        self._first_token = Histogram(
            "opensession_first_token_seconds",
            "From a turn's start to its first streamed event",
            by_model,
            buckets=SECONDS,
            registry=registry,
        )
        self._tokens = Counter("opensession_tokens", "Model tokens", [*by_model, "kind"], registry=registry)
        self._cost = Counter("opensession_cost_usd", "Model cost in US dollars", by_model, registry=registry)
        self._tools = Counter("opensession_tool_calls", "Tool calls", ["tool", "outcome"], registry=registry)
        self._admission = Histogram(
            "opensession_admission_seconds", "Prompt admission until durable", buckets=QUICK, registry=registry
        )
        self._permission = Histogram(
            "opensession_permission_wait_seconds",
            "Permission requests, by reply, and how long they waited",
            ["reply"],
            buckets=WAITS,
            registry=registry,
        )
        self._overflows = Counter(
            "opensession_subscriber_overflows", "Live subscribers cut off for lagging", ["kind"], registry=registry
        )
        self._transaction = Histogram(
            "opensession_db_transaction_seconds", "Write transactions, waits included", buckets=QUICK, registry=registry
        )
        self._lock_wait = Histogram(
            "opensession_db_lock_wait_seconds",
            "Waits for a writer connection (and the BEGIN)",
            buckets=QUICK,
            registry=registry,
        )
        self._takeovers = Counter(
            "opensession_lease_takeovers", "Sessions taken over from a dead process", registry=registry
        )
        self._providers, self._models, self._tool_names, self._errors = _Bounded(), _Bounded(), _Bounded(), _Bounded()
        # Children by label values: ``labels()`` takes a lock and builds a key each call.
        self._children: dict[tuple[str, ...], Any] = {}

    def _model(self, provider: str, model: str) -> tuple[str, str]:
        return self._providers(provider), self._models(model)

    def _child(self, metric: Any, *values: str) -> Any:
        key = (str(id(metric)), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def turn_started(self, provider: str, model: str) -> None:
        self._child(self._started, *self._model(provider, model)).inc()

    def turn_ended(self, provider: str, model: str, seconds: float, error: str | None) -> None:
        labels = self._model(provider, model)
        self._child(self._turn_seconds, *labels).observe(seconds)
        if error is None:
            self._child(self._finished, *labels).inc()
        else:
            self._child(self._failed, *labels, self._errors(error)).inc()

    def first_token(self, provider: str, model: str, seconds: float) -> None:
        self._child(self._first_token, *self._model(provider, model)).observe(seconds)

    def model_usage(self, provider: str, model: str, usage: Usage) -> None:
        labels = self._model(provider, model)
        for kind, count in (
            ("input", usage.input),
            ("output", usage.output),
            ("reasoning", usage.reasoning),
            ("cache_read", usage.cache_read),
            ("cache_write", usage.cache_write),
        ):
            if count:
                self._child(self._tokens, *labels, kind).inc(count)
        if usage.cost:
            self._child(self._cost, *labels).inc(usage.cost)

    def tool_call(self, tool: str, outcome: str) -> None:
        self._child(self._tools, self._tool_names(tool), outcome).inc()

    def admission(self, seconds: float) -> None:
        self._admission.observe(seconds)

    def permission_wait(self, reply: str, seconds: float) -> None:
        self._child(self._permission, reply).observe(seconds)

    def subscriber_overflow(self, kind: str) -> None:
        self._child(self._overflows, kind).inc()

    def transaction(self, lock_wait: float, seconds: float) -> None:
        self._lock_wait.observe(lock_wait)
        self._transaction.observe(seconds)

    def takeover(self) -> None:
        self._takeovers.inc()

    def render(self, gauges: Gauges) -> tuple[bytes, str]:
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        else:
            registry = self.registry
        live = CollectorRegistry()
        live.register(_Live(gauges))
        return generate_latest(registry) + generate_latest(live), CONTENT_TYPE_LATEST
