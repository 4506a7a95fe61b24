"""Terminals (OpenCode's ``/pty``): interactive programs on pseudo-terminals that clients drive
over WebSockets.

Owns the ptys this process serves (through their keepers), their bounded scrollback, the
connections attached to them and connect tickets; on a database shared by several processes,
the rows saying which process serves each pty and where it is reached (``pty_owners``): a pty
cannot leave its machine, so the others list it from there and forward what concerns it to its
owner (``app/api/pty_forward.py``). May import: the runtime kernel (``errors``,
``infrastructure``), events and ``app.store.pty_owners``.

Behaviour, as observed on OpenCode 1.18.33:
- output is kept (the last ``pty_buffer_chars`` UTF-16 units) whether or not anyone is
  connected; a connection is sent the output from its ``cursor`` query (absent: all that is
  held; -1: none), then a binary control frame ``\\x00{"cursor": N}`` with the position after
  it, then live output as text frames; every connection receives all output;
- a closed connection does not end the terminal: a client reconnects (with its cursor) later;
- when the process exits, ``pty.exited {id, exitCode}`` is published and the connections are
  closed (1000) after the last output; a terminal created by the legacy route then disappears
  (no ``pty.deleted``), one created by the V2 route stays listed as ``exited`` with its
  ``exitCode`` until it is removed; whatever the process left running in its session is ended;
- removing a terminal hangs up its session (SIGHUP, SIGTERM, then SIGKILL after a grace
  period), closes its connections and publishes ``pty.deleted {id}``.
Unlike OpenCode, a terminal outlives its server: each pty is held by a keeper process
(``keeper.py``), and the next server of the same database on this machine takes it up
(``_shelf.py``).
Invariant: a terminal's processes never outlive its removal, nor its server by more than
``pty_orphan_seconds`` unless another server took the terminal up.
"""

from app.runtime.terminals._domain import Terminals
from app.runtime.terminals._launch import shells
from app.runtime.terminals._placement import Elsewhere
from app.runtime.terminals._terminal import CLOSE_NORMAL, Subscription, Terminal

__all__ = ["CLOSE_NORMAL", "Elsewhere", "Subscription", "Terminal", "Terminals", "shells"]
