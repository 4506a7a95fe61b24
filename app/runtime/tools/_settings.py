"""Which optional tools the model is offered, and where ``websearch`` searches: OpenCode 1.18's
environment switches, read as it reads them, and opensession's own ``OPENSESSION_WEBSEARCH*``.

OpenCode's (its ``RuntimeFlags``; true is ``1``, ``true``, ``yes``, ``on`` or ``y``):
- ``question``: offered when ``OPENCODE_CLIENT`` (default ``cli``) is ``app``, ``cli`` or
  ``desktop``, or ``OPENCODE_ENABLE_QUESTION_TOOL`` is true;
- ``websearch``: offered to models of the ``opencode`` and ``opencode-go`` providers, and to every
  model when ``OPENCODE_ENABLE_EXA``, ``OPENCODE_EXPERIMENTAL_EXA`` or ``OPENCODE_EXPERIMENTAL``
  (Exa) or ``OPENCODE_ENABLE_PARALLEL`` / ``OPENCODE_EXPERIMENTAL_PARALLEL`` (Parallel) is true.
  Its backend: ``OPENCODE_WEBSEARCH_PROVIDER`` (``exa`` or ``parallel``, which pins and does not
  enable), else Parallel's switch, else Exa's, else each session's own by a hash of its id (half
  the sessions each way, as OpenCode splits them). ``EXA_API_KEY`` and ``PARALLEL_API_KEY`` are
  the keys, as in OpenCode.

opensession's: ``OPENSESSION_WEBSEARCH`` (``exa``, ``parallel`` or ``searxng``) offers the tool to
every model and pins its backend, before any of the above; ``OPENSESSION_EXA_URL``,
``OPENSESSION_PARALLEL_URL`` and ``OPENSESSION_SEARXNG_URL`` are where each backend is reached
(the first two default to the hosted endpoints OpenCode calls; SearXNG has no default, it is the
team's own instance). Nothing is searched unless one of these switches is on.

- ``lsp``: offered when ``OPENCODE_EXPERIMENTAL_LSP_TOOL`` is true, or when it is unset and
  ``OPENCODE_EXPERIMENTAL`` is (OpenCode's experimental switches default to the broad one).

The switches of OpenCode's other experimental tools (``..._PLAN_MODE``, ``..._CODE_MODE``) are
not read: those tools are not hosted here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

EXA_URL = "https://mcp.exa.ai/mcp"
PARALLEL_URL = "https://search.parallel.ai/mcp"
BACKENDS = ("exa", "parallel", "searxng")
# The providers OpenCode offers websearch to without any switch (its own gateways).
WEBSEARCH_PROVIDERS = frozenset({"opencode", "opencode-go"})
QUESTION_CLIENTS = frozenset({"app", "cli", "desktop"})

_TRUE = frozenset({"1", "true", "yes", "on", "y"})


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def _experimental(env: Mapping[str, str], name: str) -> bool:
    """An experimental switch: its own value when set, else ``OPENCODE_EXPERIMENTAL``'s."""
    value = env.get(name, "").strip().lower()
    return value in _TRUE if value else _flag(env, "OPENCODE_EXPERIMENTAL")


def session_hash(session_id: str) -> int:
    """OpenCode's ``checksum`` of a session id: 32-bit FNV-1a over its UTF-16 code units."""
    data = session_id.encode("utf-16-le", "surrogatepass")
    value = 2166136261
    for index in range(0, len(data), 2):
        value ^= data[index] | data[index + 1] << 8  # one code unit, as JavaScript's charCodeAt
        value = (value * 16777619) & 0xFFFFFFFF
    return value


@dataclass(frozen=True, slots=True)
class ToolSettings:
    question: bool = True
    exa: bool = False  # OpenCode's Exa switch is on
    parallel: bool = False  # OpenCode's Parallel switch is on
    websearch_provider: str | None = None  # OPENCODE_WEBSEARCH_PROVIDER: pins, does not enable
    websearch: str | None = None  # OPENSESSION_WEBSEARCH: enables and pins
    exa_url: str = EXA_URL
    exa_api_key: str | None = None
    parallel_url: str = PARALLEL_URL
    parallel_api_key: str | None = None
    searxng_url: str | None = None
    lsp_tool: bool = False  # OpenCode's experimental lsp tool is offered

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> ToolSettings:
        """The settings the environment gives; a websearch backend that cannot work (an unknown
        name, SearXNG without its URL) raises ``ValueError`` naming the variable."""
        env = os.environ if env is None else env
        websearch = env.get("OPENSESSION_WEBSEARCH", "").strip().lower() or None
        if websearch is not None and websearch not in BACKENDS:
            raise ValueError(f"OPENSESSION_WEBSEARCH must be one of {', '.join(BACKENDS)}, not {websearch!r}")
        searxng_url = env.get("OPENSESSION_SEARXNG_URL", "").strip() or None
        if websearch == "searxng" and searxng_url is None:
            raise ValueError("OPENSESSION_WEBSEARCH=searxng needs OPENSESSION_SEARXNG_URL (the instance's address)")
        pin = env.get("OPENCODE_WEBSEARCH_PROVIDER")
        client = env.get("OPENCODE_CLIENT", "cli")
        exa = ("OPENCODE_EXPERIMENTAL", "OPENCODE_ENABLE_EXA", "OPENCODE_EXPERIMENTAL_EXA")
        return cls(
            question=client in QUESTION_CLIENTS or _flag(env, "OPENCODE_ENABLE_QUESTION_TOOL"),
            exa=any(_flag(env, name) for name in exa),
            parallel=_flag(env, "OPENCODE_ENABLE_PARALLEL") or _flag(env, "OPENCODE_EXPERIMENTAL_PARALLEL"),
            websearch_provider=pin if pin in ("exa", "parallel") else None,
            websearch=websearch,
            exa_url=env.get("OPENSESSION_EXA_URL", "").strip() or EXA_URL,
            exa_api_key=env.get("EXA_API_KEY") or None,
            parallel_url=env.get("OPENSESSION_PARALLEL_URL", "").strip() or PARALLEL_URL,
            parallel_api_key=env.get("PARALLEL_API_KEY") or None,
            searxng_url=searxng_url,
            lsp_tool=_experimental(env, "OPENCODE_EXPERIMENTAL_LSP_TOOL"),
        )

    def websearch_offered(self, provider_id: str) -> bool:
        """Whether a model of ``provider_id`` is offered ``websearch`` (and may run it)."""
        return provider_id in WEBSEARCH_PROVIDERS or self.exa or self.parallel or self.websearch is not None

    def websearch_backend(self, session_id: str) -> str:
        if self.websearch is not None:
            return self.websearch
        if self.websearch_provider is not None:
            return self.websearch_provider
        if self.parallel:
            return "parallel"
        if self.exa:
            return "exa"
        return "exa" if session_hash(session_id) % 2 == 0 else "parallel"
