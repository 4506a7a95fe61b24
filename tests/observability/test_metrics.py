"""Prometheus metrics at ``/metrics``: scraped with Prometheus's own text parser, the counters
move with real turns (through the echo model), a tool call, a failed turn and a subscriber cut
off for lagging; the route is behind the password and absent when metrics are off; labels carry
no session ids."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ROOT, ThreadServer, thread_server

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ECHO = {"provider": "opensession", "model": "echo"}


def scrape(client: httpx.Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def metered(settings: Settings) -> Iterator[tuple[ThreadServer, httpx.Client]]:
    settings = settings.model_copy(update={"metrics": True, "subscriber_queue_size": 8})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield server, client


@SQLITE
def test_counters_move_with_turns_tools_failures_and_overflows(metered: tuple[ThreadServer, httpx.Client]) -> None:
    server, client = metered
    before = scrape(client)
    sid = create_session(client)["id"]
    # A subscriber of the bus that never reads: with room for 8 events a turn cuts it off.
    asyncio.run_coroutine_threadsafe(_subscribe(server), server.loop).result(timeout=10)
    ok = client.post(f"/session/{sid}/message", json=text_prompt("hello there"))
    assert ok.status_code == 200
    tool = client.post(f"/session/{sid}/message", json=text_prompt('TOOL:glob {"pattern": "*"}'))
    assert tool.status_code == 200
    failed = client.post(f"/session/{sid}/message", json=text_prompt("FAIL:fatal"))
    assert failed.status_code == 200 and failed.json()["info"]["error"]
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("opensession_turns_started_total", **ECHO) == 3
    assert moved("opensession_turns_finished_total", **ECHO) == 2
    error = failed.json()["info"]["error"]["name"]
    assert moved("opensession_turns_failed_total", **ECHO, error=error) == 1
    assert moved("opensession_turn_seconds_count", **ECHO) == 3
    assert moved("opensession_first_token_seconds_count", **ECHO) == 2  # the failed one streamed nothing
    assert moved("opensession_tokens_total", **ECHO, kind="input") > 0
    assert moved("opensession_tokens_total", **ECHO, kind="output") > 0
    assert moved("opensession_tool_calls_total", tool="glob", outcome="ok") == 1
    assert moved("opensession_admission_seconds_count") == 3
    assert moved("opensession_db_transaction_seconds_count") > 0
    assert moved("opensession_db_lock_wait_seconds_count") > 0
    assert moved("opensession_subscriber_overflows_total", kind="bus") >= 1
    assert value(after, "opensession_busy_sessions") == 0
    assert value(after, "opensession_queued_inputs") == 0
    assert value(after, "opensession_leases_held") == 0
    assert value(after, "opensession_language_servers") == 0  # lsp is off here
    assert value(after, "process_cpu_seconds_total") > 0
    for name, labels in after:  # bounded labels: never an id
        assert not any(v.startswith(("ses_", "msg_", "prt_")) for _, v in labels), (name, labels)


async def _subscribe(server: ThreadServer) -> None:
    server.runtime.bus.subscribe()


def test_a_turn_of_an_instant_model_is_three_write_transactions(settings: Settings) -> None:
    """Its admission, its step's opening together with the first part the stream opens, and the
    step's end: the opening waits for the step's first write instead of committing alone (for
    longer than a loaded machine could delay the model's first token here)."""
    settings = settings.model_copy(update={"metrics": True, "step_opening_grace_seconds": 60.0})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        sid = create_session(client)["id"]
        assert client.post(f"/session/{sid}/message", json=text_prompt("first")).status_code == 200  # and its title
        count = "opensession_db_transaction_seconds_count"
        before = value(scrape(client), count)
        assert client.post(f"/session/{sid}/message", json=text_prompt("second")).status_code == 200
        assert value(scrape(client), count) - before == 3


@SQLITE
def test_metrics_sit_behind_the_password_and_probes_do_not(settings: Settings) -> None:
    settings = settings.model_copy(update={"metrics": True, "password": "s3cret-pass"})
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.post("/healthz", json={}).status_code == 401  # only GET passes without credentials
        authorized = client.get("/metrics", auth=("opencode", "s3cret-pass"))
        assert authorized.status_code == 200 and "opensession_turns_started" in authorized.text


@SQLITE
def test_metrics_off_answers_404(client: httpx.Client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 404 and "--metrics" in response.json()["data"]["message"]


def test_workers_sharing_a_directory_are_summed(tmp_path: Path) -> None:
    """With ``PROMETHEUS_MULTIPROC_DIR`` each worker's counts go to that directory's files and a
    scrape of any worker sums them (two worker processes here)."""
    script = (
        "from app.observability import metrics\n"
        "recorder = metrics.enable()\n"
        "recorder.turn_started('p', 'm')\n"
        "import sys; sys.stdout.buffer.write(recorder.render(metrics.Gauges())[0])\n"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    outputs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=".")
        for _ in range(2)
    ]
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(outputs[-1].stdout)
        for s in family.samples
    }
    assert samples[("opensession_turns_started_total", frozenset({"provider": "p", "model": "m"}.items()))] == 2


@SQLITE
def test_the_deployed_dashboard_and_scrape_config_name_what_the_server_serves(
    metered: tuple[ThreadServer, httpx.Client],
) -> None:
    """deploy/: every metric the Grafana dashboard queries is one the server exposes, and
    Prometheus scrapes every replica the compose file runs, with the password."""
    _server, client = metered
    families = {family.name for family in text_string_to_metric_families(client.get("/metrics").text)}
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/opensession.json").read_text())
    queried = {
        re.sub(r"_(bucket|count|sum|total)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b((?:opensession|process)_[a-z_]+)", target["expr"])
    }
    assert queried and queried <= families, queried - families
    scrape_config = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    [job] = scrape_config["scrape_configs"]
    targets = {target.split(":")[0] for target in job["static_configs"][0]["targets"]}
    assert targets == {name for name in compose["services"] if name.startswith("opensession-")}
    assert job["basic_auth"]["username"] == "opencode" and "password_file" in job["basic_auth"]
    replica = compose["services"]["opensession-1"]
    assert replica["environment"]["OPENSESSION_METRICS"] == "1"
    assert "/readyz" in " ".join(replica["healthcheck"]["test"])
