"""OpenTelemetry spans of a turn: ``admission`` (the request that woke the session), ``drain``,
``turn``, and in it each ``model.call``, ``tool.call`` and ``commit`` (the step's closing
transaction). A drain's task is created in the context of the request that woke it, so its span
is a child of that admission's.

Exported only when the standard variables ask for it (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER``; ``OTEL_SERVICE_NAME`` and the
others as the SDK reads them): the SDK is imported then and only then (``pip install
opensession[otel]``), so start-up time does not grow. Otherwise ``span`` returns one shared
no-op context manager."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

Attribute = str | int | float | bool

_NOOP: AbstractContextManager[None] = nullcontext()
_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None
_ASKED_BY = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")


def span(name: str, **attributes: Attribute) -> AbstractContextManager[Any]:
    """A span around a block (it becomes the current span inside), or nothing when tracing is off."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes)  # type: ignore[no-any-return]


def annotate(**attributes: Attribute) -> None:
    """Attributes for the current span (an outcome known only at its end)."""
    if _tracer is not None:
        from opentelemetry import trace

        trace.get_current_span().set_attributes(attributes)


def install(provider: Any) -> None:
    """Trace into ``provider`` (an SDK ``TracerProvider``; tests pass one with an in-memory
    exporter). Not the global provider: nothing else of the process is traced through it."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("opensession")


def uninstall() -> None:
    global _tracer, _provider
    _tracer = _provider = None


def configure_from_env() -> bool:
    """Turn tracing on if the ``OTEL_*`` variables ask for it; returns whether it is on."""
    if _tracer is not None:
        return True
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter_name == "none" or not any(os.environ.get(name) for name in _ASKED_BY):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = os.environ.get("OTEL_SERVICE_NAME") or "opensession"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    return True


def shutdown() -> None:
    """Export what is buffered (the server stops)."""
    if _provider is not None:
        _provider.force_flush()
