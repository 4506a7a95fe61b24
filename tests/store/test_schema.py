"""The schema a fresh database is created with equals the one the Alembic migrations build, so
either path leads to the same database."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.store.database import _head_revision
from app.store.sqlite import SqliteDatabase, _create_fresh


def _schema(path: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        result: dict[str, list[tuple]] = {}
        for table in tables:
            columns = [tuple(row[1:]) for row in conn.execute(f"PRAGMA table_info('{table}')")]
            indexes = sorted(
                (row[1], row[2], tuple(c[2] for c in conn.execute(f"PRAGMA index_info('{row[1]}')")))
                for row in conn.execute(f"PRAGMA index_list('{table}')")
            )
            result[table] = [*sorted(columns), *indexes]
        versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    result["alembic_version rows"] = versions
    return result


def test_fresh_schema_matches_migrations(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    asyncio.run(SqliteDatabase(f"sqlite+aiosqlite:///{migrated}").migrate())
    fresh = tmp_path / "fresh.db"
    _create_fresh(str(fresh), _head_revision())
    assert _schema(fresh) == _schema(migrated)
    assert _schema(fresh)["alembic_version rows"] == [(_head_revision(),)]


def test_write_batches_regroup_only_commuting_statements() -> None:
    from app.store import sql
    from app.store.database import _commuting_segments
    from app.store.statement import Statement

    message, part, event = sql.UPSERT_MESSAGE, sql.UPSERT_PART, sql.INSERT_EVENT
    queued: list[tuple[Statement, dict[str, Any]]] = [
        (message, {"n": 1}),
        (part, {"n": 1}),
        (message, {"n": 2}),
        (event, {"n": 1}),
        (event, {"n": 2}),
        (part, {"n": 2}),
    ]
    segments = _commuting_segments(queued)
    assert segments == [
        [(message, {"n": 1}), (message, {"n": 2}), (part, {"n": 1})],  # regrouped, each in its own order
        [(event, {"n": 1}), (event, {"n": 2})],  # other statements keep their order and stay together
        [(part, {"n": 2})],  # nothing moves across a non-commuting statement
    ]


def test_generated_statements_are_current() -> None:
    """app/store/sql.py is what ``python -m app.store.clauses`` writes from the definitions."""
    from app.store import clauses

    assert clauses.GENERATED.read_text() == clauses.render(), "stale: run python -m app.store.clauses"


def test_a_sqlite_server_starts_without_sqlalchemy(tmp_path: Path) -> None:
    """Importing SQLAlchemy was about a fifth of the start-up: the app and a new SQLite database
    need only the generated statements."""
    script = f"""
import asyncio, sys
from app.api.app import create_app
from app.settings import Settings
where = "{tmp_path}"
app = create_app(Settings(db=f"sqlite:///{{where}}/s.db", directory=where, config_dir=where, data_dir=where))
async def main():
    async with app.router.lifespan_context(app):
        pass
asyncio.run(main())
print(sorted(name for name in sys.modules if name.split(".")[0] in ("sqlalchemy", "alembic")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


def test_postgres_text_is_compiled_ahead_from_the_definition() -> None:
    from app.store import sql

    page = sql.messages_page(descending=True, bounded=True, by_seq=False)
    assert set(page.postgres_params) == {"session_id", "bound", "limit"}
    assert page.postgres.count("$") == len(page.postgres_params)
    assert sql.UPSERT_PART.postgres.startswith("INSERT INTO parts") and "$1" in sql.UPSERT_PART.postgres


def test_only_the_flag_combinations_callers_reach_are_compiled() -> None:
    """A combination no caller passes is not in app/store/sql.py, and asking for it says where
    to declare it."""
    from app.store import clauses, sql

    assert sql.sessions_page(descending=True, anchored=True, directory=True, search=True, roots=True, before=True)
    with pytest.raises(LookupError, match=r"VARIANTS in app/store/clauses\.py"):
        sql.sessions_page(descending=False, anchored=False, directory=False, search=False, before=True)
    with pytest.raises(ValueError, match="no flags"):
        clauses._reached(clauses.session_list, ({"unknown": True},))
