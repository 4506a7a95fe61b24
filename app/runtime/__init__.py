"""The runtime: everything between the HTTP translators and storage.

Domains, each a package whose private modules (``_name.py``) only it may import; others use what
its ``__init__`` exports. Higher domains may import lower ones, never the reverse:

    service.Runtime   the composition root: builds every domain and offers the operations routers call
    turn              the drain loop, the recorder, tool calls, retry, titles, shell and commands
    inputs            durable admission and waiters
    history           messages, revert, share, compaction snapshots, the model's context
    agents | tools    agent definitions and permissions | the tools and their state (independent)
    sessions          the session service, the drain coordinator, recovery
    errors, abort, payloads   the kernel every domain may use

``import-linter`` (``[tool.importlinter]`` in pyproject.toml) enforces both rules; see
docs/architecture.md.
"""
