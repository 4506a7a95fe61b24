"""Fixtures: each test gets its own SQLite file, project directory and user config directory,
and a real opensession server on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.servers import ThreadServer, free_port, thread_server


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
def settings(tmp_path: Path, project_dir: Path, config_dir: Path) -> Settings:
    return Settings(
        db=str(tmp_path / "opensession.db"),
        directory=str(project_dir),
        config_dir=str(config_dir),
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
