"""File snapshots: the working tree recorded at every step in a shadow git repository (never the
user's own ``.git``), so a step's changes are known whoever made them (write, edit, bash, ...)
and undo puts files back.

May import: the kernel and ``app.config``. Used by ``turn`` (a snapshot around every step) and
``history`` (diffs, revert and unrevert).
Invariant: only the session directory's subtree is ever added, compared or restored, and a
restore touches only the files it is given, refusing (RevertFailed, before any file moves) a
file outside that directory or a snapshot the repository never recorded.
"""

from app.runtime.snapshots._git import OutOfTime
from app.runtime.snapshots._service import FileSnapshots

__all__ = ["FileSnapshots", "OutOfTime"]
