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

Consecutive plain inserts of one statement (a transaction's events) go as one multi-row
``INSERT``: PostgreSQL parses, plans and runs one statement instead of one per row, which was
the largest share of its CPU per turn (``bench/cluster.py``). Upserts are never merged: one
statement may not update the same row twice.
"""

from __future__ import annotations

import math
import re

from app.store.database import Params, Queued
from app.store.statement import Statement

_PLACEHOLDER = re.compile(r"\$(\d+)")
# A plain insert of one row: its text up to the row, and the row of placeholders (nothing after
# it: no ON CONFLICT, no RETURNING).
_ONE_ROW = re.compile(r"(INSERT INTO \S+ \([^()]*\) VALUES )(\([^()]*\))")

# Each statement's text split at its placeholders: text, index, text, index, ..., text.
_SPLIT: dict[Statement, list[str | int]] = {}
# Each statement's head when it is a plain one-row insert (``_ONE_ROW``), else None.
_ROW_HEAD: dict[Statement, str | None] = {}


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


def _row_head(statement: Statement) -> str | None:
    if statement not in _ROW_HEAD:
        match = _ONE_ROW.fullmatch(statement.postgres)
        _ROW_HEAD[statement] = match.group(1) if match else None
    return _ROW_HEAD[statement]


def render(queued: Queued) -> list[str] | None:
    """The statements' texts, in order, consecutive plain inserts of one statement merged into
    one; None when a value cannot be rendered."""
    texts: list[str] = []
    merging: Statement | None = None  # the insert the last text is, when more rows may join it
    try:
        for statement, params in queued:
            text = statement_text(statement, params)
            head = _row_head(statement)
            if head is not None and statement is merging:
                texts[-1] += ", " + text[len(head) :]
                continue
            texts.append(text)
            merging = statement if head is not None else None
    except Unrenderable:
        return None
    return texts
