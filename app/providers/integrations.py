"""The V2 integrations (``GET /api/integration``): each catalog provider with the ways it can be
connected and the connections it has, in OpenCode's shapes.

A provider can be connected with a key (saved as its credential) or through its environment
variables; OpenCode's OAuth methods are not offered, as opensession has no OAuth flows. Its
connections are its saved credential, then each of its variables that is set. Only the shipped
catalog's providers are integrations (a provider declared in opencode.json is not, as in
OpenCode)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from app.providers import catalog
from app.providers.credentials import Credentials

# OpenCode labels the key method of its own service; every other key method has no label.
_KEY_LABELS = {"opencode": "API key (service account)"}


def integration(provider: Mapping[str, Any], credentials: Credentials, environ: Mapping[str, str]) -> dict[str, Any]:
    provider_id = provider["id"]
    key: dict[str, Any] = {"type": "key"}
    if provider_id in _KEY_LABELS:
        key["label"] = _KEY_LABELS[provider_id]
    names = list(provider.get("env") or [])
    connections: list[dict[str, Any]] = []
    saved = credentials.connection(provider_id)
    if saved is not None:
        connections.append({"type": "credential", "id": saved[0], "label": saved[1]})
    connections += [{"type": "env", "name": name} for name in names if environ.get(name)]
    return {
        "id": provider_id,
        "name": provider.get("name") or provider_id,
        "methods": [key, {"type": "env", "names": names}],
        "connections": connections,
    }


def integrations(credentials: Credentials, environ: Mapping[str, str] = os.environ) -> list[dict[str, Any]]:
    """Every integration, by name (case aside), as OpenCode lists them."""
    providers = sorted(catalog.providers().values(), key=lambda p: (str(p.get("name") or p["id"]).casefold(), p["id"]))
    return [integration(p, credentials, environ) for p in providers]


def find(provider_id: str, credentials: Credentials, environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    provider = catalog.providers().get(provider_id)
    return None if provider is None else integration(provider, credentials, environ)
