"""Storage: tables, projectors, compiled SQL statements, read queries and the database engine.

Owns: every statement the server issues. ``queries`` reads for everyone; a module per table
group owns its writes and the reads its writers check inside their transactions (``inputs``,
``leases``, ``events``, ``project_settings``, ``saved_permissions``, ``todo_lists``,
``snapshots``, ``shares``, ``reverts``); ``projectors`` alone writes ``sessions``, ``messages``
and ``parts``. Code above calls these and never names a statement (an import contract).

May import: nothing above it (it knows nothing of HTTP, events as objects, or the runtime).
"""
