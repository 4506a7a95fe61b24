"""A write transaction's statements as one PostgreSQL script: the simple query protocol runs any
number of statements in one round trip, where the extended protocol (parameters bound apart from
the text) costs a round trip per statement, or per ``executemany`` batch.

Why render values into the text rather than bind them: asyncpg has no pipeline of different
statements, and on a link with a realistic delay the round trips of a turn's transactions were
most of its time (``bench/cluster.py``). The price is that PostgreSQL parses and plans each
statement again, which costs less than a round trip.

Rendering covers the values the store binds (``str``, ``int``, ``bool``, ``float``, ``None``):
strings become escape-string constants (``E'...'``, backslash and quote doubled), whose meaning
does not depend on ``standard_conforming_strings``; a negative number is parenthesized (so
``x-$1`` cannot become a comment). Any other value, and a string holding NUL (which would end the
query text in the protocol; PostgreSQL text cannot hold it anyway), makes ``render`` answer None:
the caller binds that batch as parameters instead.

Consecutive one-row inserts of one statement (a transaction's events, a step's parts) go as one
multi-row ``INSERT``: PostgreSQL parses, plans and runs one statement instead of one per row,
which was the largest share of its CPU per turn (``bench/cluster.py``). An upsert's rows merge
only while their conflict keys differ: one statement may not update the same row twice (its
``DO UPDATE`` takes the new values from ``excluded``, so the clause is the same for every row).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from app.store.database import Params, Queued
from app.store.statement import Statement

_PLACEHOLDER = re.compile(r"\$(\d+)")
# An insert of one row: its text up to the row, the row of placeholders, and what follows it:
# nothing, or an ON CONFLICT clause on one column without placeholders (no RETURNING).
_ONE_ROW = re.compile(r"(INSERT INTO \S+ \([^()]*\) VALUES )(\([^()]*\))((?: ON CONFLICT \((\w+)\) [^$]*)?)", re.S)


@dataclass(frozen=True, slots=True)
class _Rows:
    """How a one-row insert merges with the next: its text before the row and after it, and the
    conflict key (a parameter) that a merged statement must not repeat (None: a plain insert)."""

    head: str
    tail: str
    key: str | None


# Each statement's text split at its placeholders: text, index, text, index, ..., text.
_SPLIT: dict[Statement, list[str | int]] = {}
# Each statement's shape when it is a one-row insert (``_ONE_ROW``), else None.
_ROWS: dict[Statement, _Rows | None] = {}


class Unrenderable(TypeError):
    """A value this module does not render (the batch is bound as parameters instead)."""


def literal(value: object) -> str:
    """``value`` as a PostgreSQL constant."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:d}" if value >= 0 else f"({value:d})"
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value) if value >= 0 else f"({value!r})"
        return f"'{value!r}'::float8".replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, str):
        if "\x00" in value:  # it would end the query text in the protocol: bound, it is refused
            raise Unrenderable("a NUL character is bound as a parameter, not rendered")
        return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    raise Unrenderable(f"cannot render a {type(value).__name__} as a PostgreSQL constant")


def _split(statement: Statement) -> list[str | int]:
    split = _SPLIT.get(statement)
    if split is None:
        pieces = _PLACEHOLDER.split(statement.postgres)
        split = [piece if i % 2 == 0 else int(piece) - 1 for i, piece in enumerate(pieces)]
        _SPLIT[statement] = split
    return split


def statement_text(statement: Statement, params: Params) -> str:
    """``statement`` with ``params`` rendered in place of its placeholders."""
    values = [literal(params[name]) for name in statement.postgres_params]
    return "".join(piece if isinstance(piece, str) else values[piece] for piece in _split(statement))


def _rows(statement: Statement) -> _Rows | None:
    if statement not in _ROWS:
        match = _ONE_ROW.fullmatch(statement.postgres)
        key = match.group(4) if match else None
        mergeable = match is not None and (key is None or key in statement.postgres_params)
        _ROWS[statement] = _Rows(match.group(1), match.group(3), key) if match and mergeable else None
    return _ROWS[statement]


def render(queued: Queued) -> list[str] | None:
    """The statements' texts, in order, consecutive one-row inserts of one statement merged into
    one (an upsert's while their keys differ); None when a value cannot be rendered."""
    texts: list[str] = []
    # The insert the last text is, while more rows may join it; its rows (joined once its run
    # ends: appending each row to the text would copy it again per row, quadratic in an import's
    # thousands of events) and their conflict keys.
    merging: tuple[Statement, _Rows] | None = None
    run: list[str] = []
    keys: set[object] = set()

    def end_run() -> None:
        if merging is not None and len(run) > 1:
            texts[-1] = merging[1].head + ", ".join(run) + merging[1].tail

    try:
        for statement, params in queued:
            text = statement_text(statement, params)
            rows = _rows(statement)
            if rows is None:
                end_run()
                texts.append(text)
                merging = None
                continue
            key = params[rows.key] if rows.key is not None else None
            row = text[len(rows.head) : len(text) - len(rows.tail)]
            if merging is not None and merging[0] is statement and (key is None or key not in keys):
                run.append(row)
                keys.add(key)
                continue
            end_run()
            texts.append(text)
            merging, run, keys = (statement, rows), [row], {key}
        end_run()
    except Unrenderable:
        return None
    return texts
