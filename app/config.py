"""OpenCode-style configuration (``opencode.json``), merged from the user's config directory and
then the project directory, so a project can override what the user set globally.

``OpenCodeConfig`` is the typed view of the keys opensession acts on, built once per change of
the files; ``raw`` keeps everything as written, only so ``GET /config`` can echo it back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from platformdirs import user_config_dir

log = logging.getLogger("opensession.config")

CONFIG_NAMES = ("opencode.json", "opencode.jsonc")
CONFIG_SCHEMA = "https://opencode.ai/config.json"
_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


T = TypeVar("T")


class ConfigError(ValueError):
    """The configuration file exists but cannot be used; the message names the file."""


class _Reading:
    """The configuration as one piece of work saw it (see ``reading``): what was looked up, by key."""

    __slots__ = ("memo", "open")

    def __init__(self) -> None:
        self.memo: dict[Hashable, Any] = {}
        self.open = True


_READING: ContextVar[_Reading | None] = ContextVar("config_reading", default=None)


@contextmanager
def reading() -> Iterator[None]:
    """Within the block (a prompt's admission, a turn's step) the configuration files are checked
    on disk once per directory, and what ``memoized`` derives from them is computed once: a step
    looks its configuration up a dozen times, and each look-up stat()ed up to six files. An
    edit takes effect from the next block on. A block nested in another one shares it; a task
    started inside the block stops sharing it when the block ends."""
    if (outer := _READING.get()) is not None and outer.open:
        yield
        return
    current = _Reading()
    token = _READING.set(current)
    try:
        yield
    finally:
        current.open = False
        _READING.reset(token)


def memoized(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, once per ``reading`` block for ``key`` (every time outside one). ``key``
    names the owner too (e.g. ``(self, directory)``): several loaders may share a block."""
    current = _READING.get()
    if current is None or not current.open:
        return compute()
    if key in current.memo:
        found: T = current.memo[key]
        return found
    value = current.memo[key] = compute()
    return value


def _strip_jsonc(text: str) -> str:
    without_comments = _COMMENT.sub(lambda m: m.group(1) or "", text)
    return _TRAILING_COMMA.sub(r"\1", without_comments)


_ENV_TOKEN = re.compile(r"\{env:([^}]+)\}")
_FILE_TOKEN = re.compile(r"\{file:([^}]+)\}")


def _json_text(value: str) -> str:
    """``value`` as it may stand inside a JSON string (quotes and backslashes escaped)."""
    return json.dumps(value)[1:-1]


def _file_text(token: re.Match[str], text: str, config: Path) -> str:
    """What a ``{file:path}`` token stands for: the file's text, trimmed (a path relative to the
    config file's directory, ``~/`` for the home directory); a token on a ``//`` comment line
    stays as it is."""
    line = text[text.rfind("\n", 0, token.start()) + 1 : token.start()]
    if line.lstrip().startswith("//"):
        return token.group(0)
    name = token.group(1)
    path = Path(os.path.expanduser(name)) if name.startswith("~/") else config.parent / name
    try:
        return _json_text(path.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config}: bad file reference {token.group(0)}: {exc}") from exc


def substitute(text: str, config: Path) -> str:
    """OpenCode's variables in a config file's text, replaced before it is parsed, as OpenCode
    does: ``{env:NAME}`` by the variable (empty when unset), ``{file:path}`` by a file's text,
    both escaped for a JSON string. Only what is read is substituted: files are written back
    as they are on disk, so no secret a token names ends up in one."""
    text = _ENV_TOKEN.sub(lambda m: _json_text(os.environ.get(m.group(1), "")), text)
    return _FILE_TOKEN.sub(lambda m: _file_text(m, text, config), text)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_strip_jsonc(substitute(path.read_text(encoding="utf-8"), path)))
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
    # ``provider.<id>.env``: the variables its API key may come from, before the catalog's.
    env: tuple[str, ...] = ()
    # ``provider.<id>.options`` as written (validated where a model needs it, so a malformed value
    # fails that request with a clear error instead of every read of the configuration).
    options: Any = None


@dataclass(frozen=True)
class OpenCodeConfig:
    """The keys the server reads, each checked for its shape when the files are read: a section
    of the wrong shape declares nothing (as it did for the readers that used to pick ``raw``
    apart), while a value the server must refuse is refused where it is used, with a
    ``ConfigError`` naming the key (``agent.<name>.temperature``, ``provider.<id>.options``...),
    so one bad entry fails the request that needs it, not every read of the configuration."""

    raw: dict[str, Any]
    providers: dict[str, ProviderConfig]
    model: str | None = None
    small_model: str | None = None
    # ``agent.<name>`` as written (an entry that is not an object is an agent with no settings).
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``permission``: an action for everything (``"allow"``) or rules by permission, as written.
    permission: str | dict[str, Any] | None = None
    # ``command.<name>``: only the entries that are objects.
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``mcp.<name>`` as written: each server's spec is parsed (and its error reported) on its own.
    mcp: dict[str, Any] = field(default_factory=dict)
    # ``experimental.mcp_timeout`` (milliseconds in the file) when it is a positive integer.
    mcp_timeout_seconds: float | None = None
    snapshot: bool = True
    auto_compaction: bool = True
    watcher_ignore: tuple[str, ...] = ()
    skill_paths: tuple[str, ...] = ()
    # ``references.<name>`` as written (a path, a repository, or an object naming one).
    references: dict[str, Any] = field(default_factory=dict)
    # ``lsp`` and ``formatter``: off when omitted or false, the built-ins when true, the built-ins
    # with the overrides of each entry when an object (parsed by the domains that use them).
    lsp: bool | dict[str, Any] = False
    formatter: bool | dict[str, Any] = False

    @classmethod
    def of(cls, raw: dict[str, Any]) -> OpenCodeConfig:
        """The typed view of ``raw`` (a merged configuration, as written)."""
        agents = _section(raw, "agent")
        permission = raw.get("permission")
        timeout = _section(raw, "experimental").get("mcp_timeout")
        return cls(
            raw=raw,
            providers=_providers(raw),
            model=_text(raw.get("model")),
            small_model=_text(raw.get("small_model")),
            agents={name: spec if isinstance(spec, dict) else {} for name, spec in agents.items()},
            permission=permission if isinstance(permission, str | dict) else None,
            commands={name: spec for name, spec in _section(raw, "command").items() if isinstance(spec, dict)},
            mcp=_section(raw, "mcp"),
            mcp_timeout_seconds=timeout / 1000 if isinstance(timeout, int) and timeout > 0 else None,
            snapshot=raw.get("snapshot") is not False,
            auto_compaction=_section(raw, "compaction").get("auto", True) is not False,
            watcher_ignore=_texts(_section(raw, "watcher").get("ignore")),
            skill_paths=_texts(_section(raw, "skills").get("paths")),
            references=_section(raw, "references"),
            lsp=_switch(raw.get("lsp")),
            formatter=_switch(raw.get("formatter")),
        )


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    """``raw[key]`` when it is an object, else an empty one."""
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _switch(value: Any) -> bool | dict[str, Any]:
    """A key that is off, on, or on with overrides (``lsp``, ``formatter``): anything but true
    or an object is off."""
    return value if value is True or isinstance(value, dict) else False


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: Any) -> tuple[str, ...]:
    """The strings of a list (anything else in it, or a value that is not a list, is ignored)."""
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def _providers(raw: dict[str, Any]) -> dict[str, ProviderConfig]:
    result: dict[str, ProviderConfig] = {}
    for provider_id, spec in _section(raw, "provider").items():
        if not isinstance(spec, dict):
            continue
        raw_options = spec.get("options")
        options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
        headers = options.get("headers")
        models = {name: (m if isinstance(m, dict) else {}) for name, m in (spec.get("models") or {}).items()}
        result[provider_id] = ProviderConfig(
            id=provider_id,
            npm=spec.get("npm"),
            name=spec.get("name") or provider_id,
            base_url=options.get("baseURL") or spec.get("api"),
            api_key=options.get("apiKey"),
            headers={k: str(v) for k, v in headers.items()} if isinstance(headers, dict) else {},
            models=models,
            env=_texts(spec.get("env")),
            options=raw_options,
        )
    return result


def user_config_directory(override: str | None = None) -> Path:
    if override:
        return Path(override)
    env = os.environ.get("OPENCODE_CONFIG_DIR")
    return Path(env) if env else Path(user_config_dir("opencode", appauthor=False))


def _candidates(directory: Path, user_dir: Path) -> tuple[str, ...]:
    """Where configuration may be, lowest precedence first (whether or not the files exist)."""
    files = [user_dir / name for name in CONFIG_NAMES]
    files += [directory / name for name in CONFIG_NAMES]
    files += [directory / ".opencode" / name for name in CONFIG_NAMES]
    return tuple(str(f) for f in files)


def _stamp(candidates: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """The candidates that are regular files now, with their mtime and size: one ``stat`` each
    (what a look-up costs outside a ``reading`` block)."""
    found = []
    for path in candidates:
        try:
            st = os.stat(path)
        except (OSError, ValueError):  # absent, or a name the filesystem cannot hold
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((path, st.st_mtime_ns, st.st_size))
    return tuple(found)


def _merged(stamp: tuple[tuple[str, int, int], ...]) -> dict[str, Any]:
    """The files of a ``_stamp``, read and merged in order (later ones win)."""
    raw: dict[str, Any] = {}
    for path, _mtime, _size in stamp:
        raw = _merge(raw, _read(Path(path)))
    return raw


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

    def user_raw(self) -> dict[str, Any]:
        """The user's own configuration (their config directory's files, merged), as written."""
        return _merged(_stamp(tuple(str(self._user_dir / name) for name in CONFIG_NAMES)))

    def load(self, directory: str) -> OpenCodeConfig:
        """The directory's configuration: as the files are now, or as the enclosing ``reading``
        block first saw them."""
        return memoized((self, directory), lambda: self._load(directory))

    def _load(self, directory: str) -> OpenCodeConfig:
        candidates = self._candidates.get(directory)
        if candidates is None:
            candidates = self._candidates[directory] = _candidates(Path(directory), self._user_dir)
        stamp = _stamp(candidates)
        cached = self._cache.get(directory)
        if cached and cached[0] == stamp:
            return cached[1]
        raw = _merged(stamp)
        config = OpenCodeConfig.of(raw)
        self._warn_plugins(directory, raw)
        self._cache[directory] = (stamp, config)
        return config
