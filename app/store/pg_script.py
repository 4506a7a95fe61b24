"""A write transaction's statements as one PostgreSQL script: the simple query protocol runs any
number of statements in one round trip, where the extended protocol (parameters bound apart from
the text) costs a round trip per statement, or per ``executemany`` batch.

Why render values into the text rather than bind them: asyncpg has no pipeline of different
statements, and on a link with a realistic delay the round trips of a turn's transactions were
most of its time (``bench/cluster.py``). So that PostgreSQL need not parse and plan each
statement again, a writer connection prepares the statements it sends (``Prepared``): its
scripts run ``EXECUTE name(values)``.

Rendering covers the values the store binds (``str``, ``int``, ``bool``, ``float``, ``None``):
strings become escape-string constants (``E'...'``, backslash and quote doubled), whose meaning
does not depend on ``standard_conforming_strings``; a negative number is parenthesized (so
``x-$1`` cannot become a comment). Any other value, and a string holding NUL (which would end the
query text in the protocol; PostgreSQL text cannot hold it anyway), makes ``Prepared.script``
answer None: the caller binds that batch as parameters instead.

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


@dataclass(slots=True)
class _Group:
    """One statement of the script: ``statement`` with one row of parameters, or a one-row
    insert's consecutive rows merged (``rows`` says how it merges)."""

    statement: Statement
    rows: _Rows | None
    params: list[Params]


def _grouped(queued: Queued) -> list[_Group]:
    """``queued`` as the statements of a script: consecutive one-row inserts of one statement
    merged into one (an upsert's while their keys differ)."""
    groups: list[_Group] = []
    keys: set[object] = set()  # the conflict keys in the last group
    for statement, params in queued:
        rows = _rows(statement)
        key = params[rows.key] if rows is not None and rows.key is not None else None
        last = groups[-1] if groups else None
        if rows is not None and last is not None and last.statement is statement and (key is None or key not in keys):
            last.params.append(params)
            keys.add(key)
            continue
        groups.append(_Group(statement, rows, [params]))
        keys = {key}
    return groups


def _literal_text(group: _Group) -> str:
    """The group as a statement with its values in the text (a merged insert's rows joined once:
    appending each row to the text would copy it again per row, quadratic in an import's
    thousands of events)."""
    texts = [statement_text(group.statement, params) for params in group.params]
    if len(texts) == 1 or group.rows is None:
        return texts[0]
    head, tail = group.rows.head, group.rows.tail
    return head + ", ".join(text[len(head) : len(text) - len(tail)] for text in texts) + tail


def _prepared_text(group: _Group) -> str:
    """The group's statement for as many rows as it has, with placeholders instead of values."""
    text = group.statement.postgres
    if len(group.params) == 1 or group.rows is None:
        return text
    head, tail = group.rows.head, group.rows.tail
    row, width = text[len(head) : len(text) - len(tail)], len(group.statement.postgres_params)
    pieces = _PLACEHOLDER.split(row)  # text, number, text, ..., text

    def shifted(by: int) -> str:
        return "".join(p if i % 2 == 0 else f"${int(p) + by}" for i, p in enumerate(pieces))

    return head + ", ".join(shifted(i * width) for i in range(len(group.params))) + tail


# A connection prepares a statement for at most this many rows (a larger merge, an import's, goes
# as text), and at most this many statements: each holds a plan in its backend's memory.
PREPARED_ROWS = 16
PREPARED_LIMIT = 256


@dataclass(slots=True)
class Script:
    texts: list[str]
    prepared: list[tuple[Statement, int]]  # what its PREPAREs add to the connection's statements


class Prepared:
    """The statements one writer connection has prepared (``PREPARE``), by statement and rows.

    Why: PostgreSQL parses, analyses and plans a statement sent as text each time; a prepared
    one is planned once per connection, and ``EXECUTE name(values)`` leaves it only the values to
    read. That was about a third of the backend CPU of a turn's write scripts (the measurement is
    in bench/README.md). A statement is prepared in the script that first uses it, ahead of its
    use: a prepared statement outlives the transaction whatever becomes of it, so once a script
    has run, its PREPAREs have too. A script that failed may have run some of them: ``failed``
    forgets those, and their names are never used again (each name is new), so preparing them
    again cannot collide with one that did run."""

    def __init__(self) -> None:
        self._names: dict[tuple[Statement, int], str] = {}
        self._made = 0

    def script(self, queued: Queued) -> Script | None:
        """``queued`` as a script's statements; None when a value cannot be rendered."""
        script = Script([], [])
        try:
            for group in _grouped(queued):
                shape = (group.statement, len(group.params))
                name = self._names.get(shape)
                if name is None and len(group.params) <= PREPARED_ROWS and len(self._names) < PREPARED_LIMIT:
                    self._made += 1
                    name = self._names[shape] = f"opensession_{self._made}"
                    script.texts.append(f"PREPARE {name} AS {_prepared_text(group)}")
                    script.prepared.append(shape)
                if name is None:
                    script.texts.append(_literal_text(group))
                    continue
                names = group.statement.postgres_params
                values = ", ".join(literal(params[n]) for params in group.params for n in names)
                script.texts.append(f"EXECUTE {name}({values})" if values else f"EXECUTE {name}")
        except Unrenderable:
            self.failed(script)
            return None
        return script

    def failed(self, script: Script) -> None:
        """``script`` did not run through: forget what it was to prepare."""
        for shape in script.prepared:
            self._names.pop(shape, None)
