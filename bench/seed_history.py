"""Fill a benchmark database with long sessions through the project's own runtime.

Posting 100,000 messages through the HTTP API would take far too long, and rows written by hand
could drift from what the server writes. ``History.append_message`` emits the same durable events
(``message.updated``, ``message.part.updated``) with the same projections and sequence numbers as
a turn does, so the server later reads exactly what it would have written itself.

``bench/history.py`` runs this in a process of its own and before the server starts: the server
must be the database's only writer, and its per-session ``seq`` cache starts from the log. One
JSON object goes to stdout::

    python bench/seed_history.py --db PATH --directory DIR --config-dir DIR 1000 10000 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from app import ids
from app.clock import now_ms
from app.providers.base import Usage
from app.runtime.inputs import StoredPrompt, user_message_info
from app.runtime.service import Runtime
from app.runtime.turn import tokens_of
from app.settings import Settings

BATCH = 500  # messages per write transaction: large enough to amortise the commit, small enough to stay bounded
ECHO_MODEL = {"providerID": "opensession", "modelID": "echo"}
Message = tuple[dict[str, Any], list[dict[str, Any]]]


def user_message(session_id: str, index: int) -> Message:
    """A prompt as admission stores it (the same info builder)."""
    text = f"message {index}: hi"
    parts = [{"type": "text", "text": text}]
    stored = StoredPrompt(request={}, agent="build", model=ECHO_MODEL, prompt={"text": text}, parts=parts)
    return user_message_info(session_id, ids.message_id(), stored, now_ms()), parts


def assistant_message(session_id: str, directory: str, parent_id: str, index: int) -> Message:
    """The echo model's answer to ``parent_id``, as the runner and recorder finish it: one step
    (step-start, text, step-finish)."""
    created = now_ms()
    tokens = tokens_of(Usage(input=1, output=2))
    info = {
        "id": ids.message_id(),
        "sessionID": session_id,
        "role": "assistant",
        "time": {"created": created, "completed": created},
        "parentID": parent_id,
        "modelID": ECHO_MODEL["modelID"],
        "providerID": ECHO_MODEL["providerID"],
        "mode": "build",
        "agent": "build",
        "path": {"cwd": directory, "root": directory},
        "cost": 0.0,
        "tokens": tokens,
        "finish": "stop",
    }
    parts = [
        {"type": "step-start"},
        {"type": "text", "text": f"Echo: message {index - 1}: hi", "time": {"start": created, "end": created}},
        {"type": "step-finish", "reason": "stop", "cost": 0.0, "tokens": tokens},
    ]
    return info, parts


async def seed_session(runtime: Runtime, directory: str, messages: int) -> dict[str, Any]:
    """A session of ``messages`` messages, prompts and answers alternating, ``BATCH`` per
    transaction. Returns its id, its newest message id and the seconds it took."""
    started = time.perf_counter()
    session = await runtime.sessions.create(directory, title=f"bench history {messages}")
    newest = ""
    for first in range(0, messages, BATCH):
        async with runtime.log.transaction() as tx:
            for index in range(first, min(first + BATCH, messages)):
                if index % 2 == 0:
                    info, parts = user_message(session["id"], index)
                else:
                    info, parts = assistant_message(session["id"], directory, newest, index)
                await runtime.history.append_message(tx, session, info, parts)
                newest = info["id"]
    return {"id": session["id"], "messages": messages, "newest": newest, "seconds": time.perf_counter() - started}


async def seed(db: str, directory: str, config_dir: str, sizes: list[int]) -> list[dict[str, Any]]:
    runtime = Runtime(Settings(db=db, directory=directory, config_dir=config_dir))
    await runtime.db.open()
    try:
        await runtime.log.start()
        return [await seed_session(runtime, directory, size) for size in sizes]
    finally:
        await runtime.db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", required=True, help="SQLite file (created when missing)")
    parser.add_argument("--directory", required=True, help="the sessions' project directory")
    parser.add_argument("--config-dir", required=True, help="config directory (an empty one: the echo model)")
    parser.add_argument("sizes", nargs="+", type=int, help="messages per session, one session each (even)")
    args = parser.parse_args(argv)
    if any(size <= 0 or size % 2 for size in args.sizes):
        parser.error("sizes must be positive and even (prompt, answer, prompt, ...)")
    sessions = asyncio.run(seed(args.db, args.directory, args.config_dir, args.sizes))
    json.dump({"sessions": sessions}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
