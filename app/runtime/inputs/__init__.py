"""Durable input admission: a prompt is committed before anyone answers the client.

Owns the admission of prompts (validation, idempotent client-chosen ids, ``steer``/``queue``
delivery, deferred V2 user messages) and the waiters that let a synchronous prompt wait for its
own answer.

May import: ``history`` (appending the user message, committing a staged revert), ``agents``,
``sessions``, the runtime kernel, events, store, providers (model resolution).
Invariant: the input row, the user message and their events commit in one transaction before
the 204/200; a retried id with other content is a conflict, decided inside that transaction.
"""

from app.runtime.inputs._admission import (
    DEFAULT_AGENT,
    Admitted,
    PromptRequest,
    compaction_request,
    is_compaction,
    user_message_info,
)
from app.runtime.inputs._domain import InputsDomain
from app.runtime.inputs._stored import StoredPrompt

__all__ = [
    "DEFAULT_AGENT",
    "Admitted",
    "InputsDomain",
    "PromptRequest",
    "StoredPrompt",
    "compaction_request",
    "is_compaction",
    "user_message_info",
]
