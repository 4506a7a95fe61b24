"""Liveness and readiness: ``/healthz`` answers while the process runs, ``/readyz`` only once
start-up (recovery included) has finished and while the database answers: false while
PostgreSQL is stopped, true again once it is back. ``/global/health`` keeps OpenCode's answer."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.postgres import Cluster
from tests.servers import free_port, thread_server


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_probes_on_sqlite(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"live": True}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"ready": True, "started": True, "database": "ok"}
    assert set(client.get("/global/health").json()) == {"healthy", "version"}


def _ready_becomes(client: httpx.Client, expected: bool, timeout: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get("/readyz")
        if (response.status_code == 200) == expected or time.monotonic() > deadline:
            assert (response.status_code == 200) == expected, response.text
            body: dict[str, object] = response.json()
            return body
        time.sleep(0.2)


def test_readiness_follows_postgresql(own_cluster: Cluster, tmp_path: Path) -> None:
    settings = Settings(
        db=own_cluster.create_database(),
        directory=str(tmp_path),
        config_dir=str(tmp_path / "config"),
        data_dir=str(tmp_path / "data"),
        port=free_port(),
    )
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        assert _ready_becomes(client, True)["database"] == "ok"
        own_cluster.halt()
        down = _ready_becomes(client, False)
        assert down["started"] is True and down["database"] != "ok"
        assert client.get("/healthz").status_code == 200  # alive all along: only not ready
        own_cluster.resume()
        assert _ready_becomes(client, True)["database"] == "ok"
