"""Where and how one provider's API is reached, read from opencode.json as OpenCode reads it, so
the same file reaches the same URLs with the same headers and timeouts here.

``base_url`` has OpenCode's (the AI SDK's) meaning: the prefix an API path is appended to, which
for most APIs already ends in ``/v1`` (``https://api.anthropic.com/v1`` + ``/messages``). Each
provider client maps it onto its SDK, whose own base URLs sometimes mean something else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.config import ConfigError
from app.providers.base import ProviderError, missing_key_message

DEFAULT_TIMEOUT_S = 300.0  # OpenCode's default ``timeout`` (300,000 ms)


@dataclass(frozen=True, slots=True)
class Connection:
    """Hashable: provider clients are cached by it, so a changed key or URL makes a new one."""

    provider_id: str
    name: str  # the provider's display name, for messages
    base_url: str | None  # None: the SDK's default (and its ``*_BASE_URL`` variable)
    api_key: str | None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float | None = DEFAULT_TIMEOUT_S  # None: no limit (``"timeout": false``)
    # Where a key may come from, named when a needed one is missing; empty when none is needed.
    key_env: tuple[str, ...] = ()
    needs_key: bool = False

    @property
    def header_map(self) -> dict[str, str]:
        return dict(self.headers)

    def missing_key(self) -> ProviderError | None:
        """The ProviderAuthError every request fails with when a needed key is missing."""
        if self.api_key or not self.needs_key:
            return None
        message = missing_key_message(self.name, self.provider_id, list(self.key_env))
        return ProviderError(message, name="ProviderAuthError", provider_id=self.provider_id)


def timeout_seconds(provider_id: str, options: Mapping[str, Any]) -> float | None:
    """``provider.<id>.options.timeout``: milliseconds, ``false`` for none, 300 s when unset."""
    value = options.get("timeout")
    if value is None or value is True:
        return DEFAULT_TIMEOUT_S
    if value is False:
        return None
    if isinstance(value, int | float) and value > 0:
        return float(value) / 1000
    raise ConfigError(
        f"opencode.json: provider.{provider_id}.options.timeout must be milliseconds or false, got {value!r}"
    )
