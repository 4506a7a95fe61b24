"""The architecture is checked, not just drawn: the import layers and domain boundaries declared
in pyproject.toml (``[tool.importlinter]``) and the type hints (``[tool.mypy]``: strict for
``app/``, a relaxed profile for ``tests/``) hold. See docs/architecture.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.store import sql
from app.store.statement import Statement

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=590)


def test_import_layers_and_domain_boundaries_hold() -> None:
    result = _run(str(BIN / "lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout and "KEPT" in result.stdout


@pytest.mark.timeout(600)  # a cold run (CI's) analyses the libraries too: minutes on two busy cores
def test_types_check() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_only_projectors_write_sessions_messages_and_parts() -> None:
    """The query tables can always be rebuilt from the log: no module but the projectors names a
    statement that writes them."""
    writes = re.compile(r"(INSERT INTO|DELETE FROM|UPDATE) (sessions|messages|parts)\b")
    patterns = []  # how code names each such statement
    for name, value in vars(sql).items():
        entries = value.items() if isinstance(value, dict) else [(None, value)]
        for key, statement in entries:
            if isinstance(statement, Statement) and writes.match(statement.sqlite):
                patterns.append(rf"sql\.{name}\b" if key is None else rf"sql\.{name}\[[\"']{key}[\"']\]")
    assert len(patterns) >= 6  # the upserts and deletes of the three tables
    generated = {ROOT / "app" / "store" / "sql.py", ROOT / "app" / "store" / "clauses.py"}
    writers = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "app").rglob("*.py")
        if path not in generated and any(re.search(pattern, path.read_text()) for pattern in patterns)
    }
    assert writers == {"app/store/projectors.py"}
