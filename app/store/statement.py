"""A SQL statement as the server issues it: a frozen value compiled ahead of time from its
SQLAlchemy definition (``app/store/clauses.py``) into ``app/store/sql.py``, with its text for
each dialect. Neither engine needs SQLAlchemy to run one.

The database API takes only these, never a ``str``: a plain string would lose its parameters on
PostgreSQL (which takes them by position), yet run on SQLite.

Invariant: each statement is one object, compared by identity (a write transaction batches
consecutive uses of the same statement into one ``executemany``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, eq=False)
class Statement:
    name: str  # where it is defined in app/store/clauses.py (and, for a variant, its flags)
    sqlite: str  # named parameters (``:name``)
    postgres: str  # positional parameters (``$n``)...
    postgres_params: tuple[str, ...]  # ...filled from these named ones, in order
    quick: bool = False  # a read that touches few rows through an index (the SQLite engine runs it inline)
    commutes: bool = False  # an upsert a transaction may regroup with other commuting ones (``WriteScope``)


class Variants(dict[tuple[bool, ...], Statement]):
    """The compiled combinations of one statement's flags, keyed by the flags' values: only those
    its callers reach (``VARIANTS`` in app/store/clauses.py)."""

    def __init__(self, name: str, compiled: dict[tuple[bool, ...], Statement]) -> None:
        super().__init__(compiled)
        self.name = name

    def __missing__(self, flags: tuple[bool, ...]) -> Statement:
        raise LookupError(f"{self.name}{flags} is not compiled: add it to VARIANTS in app/store/clauses.py")
