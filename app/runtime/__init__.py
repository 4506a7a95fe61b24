"""The runtime: everything between the HTTP translators and storage.

Domains, each a package whose private modules (``_name.py``) only it may import; others use what
its ``__init__`` exports. Higher domains may import lower ones, never the reverse:

    service.Runtime   the composition root: builds every domain and offers the operations routers call
    prompting         prompt (and wait), sub-agents, abort, interrupt, summarize: built before the
                      tools and the turn, which reach it through their own protocols
    turn              the drain loop, the recorder, tool calls, retry, titles, shell and commands
    inputs            durable admission and waiters
    history           messages, revert, share, import, file diffs, compaction summaries, the model's context
    extensions        MCP servers per directory and their tools
    agents | tools | snapshots | terminals    (independent of each other) agent definitions, permissions
                      and questions | the tools and their state | per-step file snapshots in a shadow
                      git repository | the ptys behind /pty
    sessions          the session service, the drain coordinator, recovery, the topology (one process or a cluster)
    workspace         the project's files, search and git status (the routers and the tools share it)
    infrastructure, errors, abort, payloads   the kernel every domain may use

``integrations`` (the V2 integration routes over provider credentials) is a module beside them
that only ``service`` builds.

``import-linter`` (``[tool.importlinter]`` in pyproject.toml) enforces both rules; see
docs/architecture.md.
"""
