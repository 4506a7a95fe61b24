"""Git worktrees for parallel agents on one repository (``/experimental/worktree``): creating one
on a new branch ``opencode/<name>`` in the server's data directory (``<data>/worktree/<project
id>/<name>``), filling it in the background (``worktree.ready`` or ``worktree.failed`` on the
global stream) and running the project's start commands there, listing them (the project's
``sandboxes``), resetting one to the default branch and removing it with its branch.

A session whose directory is a worktree belongs to the main project (the id of the repository's
root commit is the same) and its tools act inside the worktree only, as everywhere.

May import: the runtime kernel, ``sessions`` (the project and its ``sandboxes``) and
``workspace`` (its git runner).
Invariants: nothing is removed, reset or cleaned but a directory that ``git worktree list`` of
this project names *and* that is a worktree directory of this project under the data directory
(paths resolved first); a forged or unknown directory is refused and left as it is. The
exceptions are what an add this server journaled and did not finish began (``_adds``): the tree's
directory, beside the journal under this project's worktree directory, and the administrative
directory git made for it (named after it, naming it or not written yet); and what is left of a
removal it journaled and did not finish (``_removals``): the tree beside the journal, its branch.
Git commands and start commands run as children tied to the server and end with it.
"""

from app.runtime.worktrees._service import Dispose, Worktrees

__all__ = ["Dispose", "Worktrees"]
