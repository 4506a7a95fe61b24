"""The turn: the drain loop that answers admitted prompts.

Owns the runner (promote inputs, then each step planned, opened, streamed and finished; continue,
retry), the two kinds of step (a model step, a compaction step: ``_steps``), the recorder that
writes one assistant message in both event families, tool-call execution, the retry policy, title
generation, and the user-run turns (shell and project commands).

May import: every other domain through its package (never their private modules), the runtime
kernel, events, store, providers.
Invariant: an input is settled in the same transaction as the last step of the turn that answers
it, so a stop in any step leaves it open for recovery.
"""

from app.runtime.turn._commands import Commands
from app.runtime.turn._domain import TurnDomain
from app.runtime.turn._recorder import tokens_of

__all__ = ["Commands", "TurnDomain", "tokens_of"]
