"""Fixtures: each test gets its own database, project directory and user config directory, and a
real opensession server on a loopback port.

``database_url`` is the one engine parameter: every test that uses it (directly, or through
``settings``/``server``/``client``) runs on SQLite (a file of its own) and on PostgreSQL (a fresh
database on the run's throwaway cluster, see tests/postgres.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.events.bus import EventBus
from app.events.log import EventLog
from app.runtime.tools import FileEdits, TodoStore, ToolServices
from app.settings import Settings
from app.store.database import open_database
from tests.postgres import Cluster, start_cluster
from tests.servers import ThreadServer, free_port, thread_server
from tests.tool_harness import Harness


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than the cores this process may run on. Much of the suite
    waits rather than computes (server processes starting, leases lapsing, processes killed and
    restarted), and the extra worker fills those waits; a second extra one only adds contention
    (bench/README.md has the timings). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster | None]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own: it is stopped and started again, which others must not see."""
    cluster = start_cluster()
    if cluster is None or cluster._directory is None:
        if cluster is not None:
            pytest.skip("OPENSESSION_TEST_PG points at a server this test cannot stop")
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'opensession.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def pg_url(postgres_cluster: Cluster | None) -> str:
    """A new database of its own on the session's PostgreSQL cluster."""
    if postgres_cluster is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: .ci/run installs it (apt-get install postgresql)")
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql)")
    return postgres_cluster.create_database()


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.mkdir()
    return path


@pytest.fixture
def settings(database_url: str, project_dir: Path, config_dir: Path) -> Settings:
    return Settings(
        db=database_url,
        directory=str(project_dir),
        config_dir=str(config_dir),
        data_dir=str(config_dir.parent / "data"),
        port=free_port(),
        heartbeat_seconds=10.0,
    )


@pytest.fixture
def server(settings: Settings) -> Iterator[ThreadServer]:
    with thread_server(settings) as handle:
        yield handle


@pytest.fixture
def client(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        yield http


@pytest.fixture
async def tools(tmp_path: Path, database_url: str) -> AsyncIterator[Harness]:
    """A tool harness on a fresh project directory and database."""
    root = tmp_path / "project"
    root.mkdir()
    db = open_database(database_url)
    await db.open()
    log = EventLog(db, EventBus(64))
    await log.start()
    yield Harness(root, ToolServices(todos=TodoStore(log), files=FileEdits(log), tasks=None))  # type: ignore[arg-type]  # runs no subagent
    await db.close()
