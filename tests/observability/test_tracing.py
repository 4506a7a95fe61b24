"""OpenTelemetry: a turn's spans, exported to an in-memory exporter, form the tree admission ->
drain -> turn -> (model calls, tool calls, commits); with no ``OTEL_*`` variable the SDK is not
even imported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.observability import tracing
from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ROOT, thread_server


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    try:
        yield memory
    finally:
        tracing.uninstall()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_turns_spans_form_its_tree(settings: Settings, exporter: InMemorySpanExporter) -> None:
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        answered = client.post(f"/session/{sid}/message", json=text_prompt('TOOL:glob {"pattern": "*"}'))
        assert answered.status_code == 200
    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}

    def parent(span: ReadableSpan) -> str | None:
        return by_id[span.parent.span_id].name if span.parent and span.parent.span_id in by_id else None

    [admission] = [s for s in spans if s.name == "admission"]
    [drain] = [s for s in spans if s.name == "drain"]
    [turn] = [s for s in spans if s.name == "turn"]
    assert parent(admission) is None and parent(drain) == "admission" and parent(turn) == "drain"
    assert drain.attributes is not None and drain.attributes["session.id"] == sid
    assert {s.context.trace_id for s in spans if s.name in ("admission", "drain", "turn")} == {
        admission.context.trace_id
    }
    children = sorted(s.name for s in spans if parent(s) == "turn")
    assert children == ["commit", "commit", "model.call", "model.call", "tool.call"]  # two steps, one tool
    [tool] = [s for s in spans if s.name == "tool.call"]
    assert tool.attributes is not None and tool.attributes["tool"] == "glob"
    assert turn.attributes is not None and turn.attributes["outcome"] == "finished"
    assert turn.attributes["model"] == "echo"


def test_without_otel_variables_or_metrics_neither_library_is_imported() -> None:
    script = (
        "import sys\n"
        "from app.observability import tracing\n"
        "from app.runtime.service import Runtime\n"
        "assert not tracing.configure_from_env()\n"
        "assert not any(name.startswith('opentelemetry') for name in sys.modules), 'imported'\n"
        "assert 'prometheus_client' not in sys.modules, 'metrics are off: the client is not imported'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
