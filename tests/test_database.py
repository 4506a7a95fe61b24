"""Engines at their edges: SQLite serves one process per file, and a database that cannot be
reached stops start-up with one clear line and a non-zero status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import ROOT, free_port, process_server


def _serve(db: str, directory: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port()), "--db", db]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.slow
def test_a_second_process_on_one_sqlite_file_is_refused(tmp_path: Path, project_dir: Path, config_dir: Path) -> None:
    db = str(tmp_path / "shared.db")
    first = process_server(db, project_dir, config_dir)
    first.start()
    try:
        second = _serve(db, project_dir)
    finally:
        first.stop()
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by opensession pid" in lines[0] and "PostgreSQL" in lines[0]
    assert first.proc is not None and first.proc.returncode is not None  # stopped by us, not crashed


def test_an_unreachable_database_stops_start_up_with_one_line(project_dir: Path) -> None:
    port = free_port()  # nothing listens there
    result = _serve(f"postgresql+asyncpg://user:secret@127.0.0.1:{port}/db", project_dir)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "secret" not in lines[0]


def test_an_unsupported_database_url_is_one_line(project_dir: Path) -> None:
    result = _serve("mysql://localhost/db", project_dir)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("opensession: unsupported database URL")
