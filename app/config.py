"""OpenCode-style configuration (``opencode.json``), merged from the user's config directory and
then the project directory, so a project can override what the user set globally.

Only the keys opensession acts on are interpreted (``model``, ``provider``); everything else is
kept so ``GET /config`` can echo it back to clients.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platformdirs import user_config_dir

log = logging.getLogger("opensession.config")

CONFIG_NAMES = ("opencode.json", "opencode.jsonc")
_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class ConfigError(ValueError):
    """The configuration file exists but cannot be used; the message names the file."""


def _strip_jsonc(text: str) -> str:
    without_comments = _COMMENT.sub(lambda m: m.group(1) or "", text)
    return _TRAILING_COMMA.sub(r"\1", without_comments)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_strip_jsonc(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must contain a JSON object")
    return data


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class ProviderConfig:
    id: str
    npm: str | None
    name: str
    base_url: str | None
    api_key: str | None
    models: dict[str, dict[str, Any]]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenCodeConfig:
    raw: dict[str, Any]
    providers: dict[str, ProviderConfig]
    model: str | None


def expand_env(value: Any) -> Any:
    """OpenCode allows ``{env:NAME}`` in option strings (provider options, MCP servers); resolve
    it the same way (an unset variable is empty)."""
    if isinstance(value, str):
        return re.sub(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), value)
    return value


def _providers(raw: dict[str, Any]) -> dict[str, ProviderConfig]:
    result: dict[str, ProviderConfig] = {}
    for provider_id, spec in (raw.get("provider") or {}).items():
        if not isinstance(spec, dict):
            continue
        options = spec.get("options") or {}
        models = {name: (m if isinstance(m, dict) else {}) for name, m in (spec.get("models") or {}).items()}
        result[provider_id] = ProviderConfig(
            id=provider_id,
            npm=spec.get("npm"),
            name=spec.get("name") or provider_id,
            base_url=expand_env(options.get("baseURL") or spec.get("api")),
            api_key=expand_env(options.get("apiKey")),
            headers={k: str(expand_env(v)) for k, v in (options.get("headers") or {}).items()},
            models=models,
        )
    return result


def user_config_directory(override: str | None = None) -> Path:
    if override:
        return Path(override)
    env = os.environ.get("OPENCODE_CONFIG_DIR")
    return Path(env) if env else Path(user_config_dir("opencode", appauthor=False))


def _candidates(directory: Path, user_dir: Path) -> tuple[str, ...]:
    """Where configuration may be, in merge order (a later file overrides an earlier one)."""
    places = (user_dir, directory, directory / ".opencode")
    return tuple(str(place / name) for place in places for name in CONFIG_NAMES)


def _present(candidates: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """The configuration files there now, each with its modification time and size: one stat
    per place, as this runs on every read of the configuration (several per turn)."""
    found = []
    for path in candidates:
        try:
            info = os.stat(path)
        except (OSError, ValueError):  # absent, or a name the filesystem cannot hold
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((path, info.st_mtime_ns, info.st_size))
    return tuple(found)


def plugin_names(raw: dict[str, Any]) -> list[str]:
    """The ``plugin`` entries of a config (``"name"`` or ``["name", {options}]``), by name."""
    entries = raw.get("plugin")
    names = []
    for entry in entries if isinstance(entries, list) else []:
        name = entry[0] if isinstance(entry, list) and entry else entry
        names.append(name if isinstance(name, str) else json.dumps(name))
    return names


class ConfigLoader:
    """Reads and caches configuration per directory; a changed file (mtime) is re-read."""

    def __init__(self, user_dir: str | None = None) -> None:
        self._user_dir = user_config_directory(user_dir)
        self._cache: dict[str, tuple[tuple[tuple[str, int, int], ...], OpenCodeConfig]] = {}
        self._candidates: dict[str, tuple[str, ...]] = {}
        self._warned: set[tuple[str, ...]] = set()

    def _warn_plugins(self, directory: str, raw: dict[str, Any]) -> None:
        """OpenCode plugins are JavaScript, which cannot run here: say once which are ignored."""
        names = tuple(plugin_names(raw))
        if names and names not in self._warned:
            self._warned.add(names)
            log.warning(
                "ignoring opencode.json plugin entries for %s (JavaScript plugins cannot run in opensession): %s",
                directory,
                ", ".join(names),
            )

    @property
    def user_dir(self) -> Path:
        """The user's config directory (where opencode.json, skills... are looked for)."""
        return self._user_dir

    def load(self, directory: str) -> OpenCodeConfig:
        candidates = self._candidates.get(directory)
        if candidates is None:
            candidates = self._candidates[directory] = _candidates(Path(directory), self._user_dir)
        stamp = _present(candidates)
        cached = self._cache.get(directory)
        if cached and cached[0] == stamp:
            return cached[1]
        raw: dict[str, Any] = {}
        for path, _mtime, _size in stamp:
            raw = _merge(raw, _read(Path(path)))
        config = OpenCodeConfig(raw=raw, providers=_providers(raw), model=raw.get("model"))
        self._warn_plugins(directory, raw)
        self._cache[directory] = (stamp, config)
        return config
