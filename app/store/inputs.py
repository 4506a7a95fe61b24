"""Writes to the ``inputs`` table, the durable admission queue, and the reads its writers check
inside their transactions (``Queries`` lists inputs for everyone else).

Invariant: an input is inserted once, when admitted (with its user message, in one transaction);
it is promoted when a step takes it and completed when the turn that answers it settles, or when
the history it entered is removed."""

from __future__ import annotations

from app.store import sql
from app.store.database import Reader, WriteScope
from app.store.queries import InputRow


def insert(scope: WriteScope, row: InputRow) -> None:
    scope.execute(sql.INSERT_INPUT, row.as_params())


async def by_id(reader: Reader, input_id: str) -> InputRow | None:
    rows = await reader.fetch(sql.INPUT_BY_ID, {"id": input_id})
    return InputRow(*rows[0]) if rows else None


async def by_request_key(reader: Reader, session_id: str, key: str) -> InputRow | None:
    """The session's input admitted under the Idempotency-Key ``key``, if any."""
    rows = await reader.fetch(sql.INPUT_BY_REQUEST_KEY, {"session_id": session_id, "key": key})
    return InputRow(*rows[0]) if rows else None


def promote(scope: WriteScope, input_id: str, seq: int) -> None:
    """The input entered the history at ``seq`` (a step took it)."""
    scope.execute(sql.PROMOTE_INPUT, {"id": input_id, "promoted_seq": seq})


def complete(scope: WriteScope, input_id: str) -> None:
    scope.execute(sql.COMPLETE_INPUT, {"id": input_id})


async def any_unsettled(reader: Reader, session_id: str) -> bool:
    """Whether an input of the session is not completed."""
    return bool(await reader.fetch(sql.UNSETTLED_INPUTS, {"session_id": session_id}))
