"""A session's history: messages and parts as clients list them, and the model's view of them.

Owns the history service (the only way routes reach messages: paging, append, copy, truncate,
part edits), import of exported sessions, the session's file diffs (from the step snapshots),
revert (stage / clear / commit, restoring files), sharing, compaction snapshots and the rendering of
a history window into the model's messages.

May import: ``sessions`` (the session service, and the coordinator to hold a session still),
``snapshots`` (file diffs and restores), the
runtime kernel, events, store, providers (model limits).
Invariants: history never moves under a running turn (every write that moves it holds the
session still from its busy check to its commit); compaction never rewrites what clients list;
a revert's files and marker agree after any stop (its journal is finished at the next start).
"""

from app.runtime.history._compaction import (
    SUMMARY_INSTRUCTION,
    SUMMARY_SYSTEM,
    Summaries,
    Summary,
    Window,
    overflows,
    transcript,
)
from app.runtime.history._context import model_messages, system_prompts
from app.runtime.history._diffs import SessionDiffs
from app.runtime.history._domain import HistoryDomain
from app.runtime.history._import import Importer
from app.runtime.history._revert import Reverts, commit_staged
from app.runtime.history._service import History
from app.runtime.history._share import Shares
from app.store.queries import RawMessage  # the shapes the history hands out
from app.wire import MessageWithParts

__all__ = [
    "SUMMARY_INSTRUCTION",
    "SUMMARY_SYSTEM",
    "History",
    "HistoryDomain",
    "Importer",
    "MessageWithParts",
    "RawMessage",
    "Reverts",
    "SessionDiffs",
    "Shares",
    "Summaries",
    "Summary",
    "Window",
    "commit_staged",
    "model_messages",
    "overflows",
    "system_prompts",
    "transcript",
]
