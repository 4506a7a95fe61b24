"""A SQL statement as the server issues it: its SQLite text (the string itself, so it serves as SQL
and as a key), plus where its SQLAlchemy definition is (``app/store/clauses.py``) so that the
PostgreSQL form is compiled from it on first use. SQLite never needs SQLAlchemy at run time."""

from __future__ import annotations

from typing import Any

# Where a statement is defined in app/store/clauses.py: a module-level name, a name and a key of a
# dict there, or a function there and its keyword arguments.
Source = tuple[Any, ...]


class Statement(str):
    source: Source
    quick: bool  # a read that touches few rows through an index (the SQLite engine runs it inline)
    _postgres: tuple[str, tuple[str, ...]] | None

    def __new__(cls, sqlite: str, source: Source, *, quick: bool = False) -> Statement:
        statement = super().__new__(cls, sqlite)
        statement.source, statement.quick, statement._postgres = source, quick, None
        return statement

    def for_postgres(self) -> tuple[str, tuple[str, ...]]:
        """The PostgreSQL text with positional ``$n`` parameters, and the names that fill them."""
        if self._postgres is None:
            from app.store import clauses

            self._postgres = clauses.resolve(self.source).for_postgres()
        return self._postgres
