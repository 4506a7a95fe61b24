"""Which model answers a prompt: the built-in echo model, the native providers (Anthropic's and
OpenAI's APIs through their SDKs, with no provider block needed) and every OpenAI-compatible
provider declared in the directory's opencode.json. Provider clients are cached so connections
are reused across turns."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.config import ConfigError, ConfigLoader, OpenCodeConfig, ProviderConfig, memoized
from app.providers import catalog
from app.providers.base import ModelInfo, Provider, missing_key_message
from app.providers.credentials import Credentials
from app.providers.echo import ECHO_MODEL, EchoProvider
from app.providers.models import model_entry, model_info
from app.providers.options import ANTHROPIC_PACKAGE, OPENAI_PACKAGE
from app.providers.suggest import fuzzy, model_suggestions
from app.settings import default_data_dir

# Packages of providers whose API takes OpenAI's chat completions (Groq, Mistral and xAI have
# SDK packages of their own in OpenCode but serve that API too, at the URLs below).
OPENAI_COMPATIBLE_PACKAGES = {
    "@ai-sdk/openai-compatible",
    "@ai-sdk/openai",
    "@ai-sdk/groq",
    "@ai-sdk/mistral",
    "@ai-sdk/xai",
    None,
}
# Catalog providers speaking OpenAI's API whose models.dev entry names no URL.
DEFAULT_URLS = {
    "openai": "https://api.openai.com/v1",
    "groq": "https://api.groq.com/openai/v1",
    "mistral": "https://api.mistral.ai/v1",
    "xai": "https://api.x.ai/v1",
}
# OpenCode's small-model families, most wanted first (``Provider.getSmallModel``), and the
# providers it never picks one for (their deployments are not known from the catalog).
SMALL_FAMILIES = ("gemini-flash", "gpt-nano", "claude-haiku")
NO_SMALL_MODEL = frozenset({"azure", "azure-cognitive-services"})
UNLISTED_STATUSES = ("deprecated", "alpha")  # models OpenCode leaves out of a provider's list
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _anthropic(provider_id: str, key: str | None, url: str | None, headers: dict[str, str]) -> Provider:
    from app.providers.anthropic import AnthropicProvider  # the SDK loads on first request

    return AnthropicProvider(provider_id, key, url, headers)


def _openai(provider_id: str, key: str | None, url: str | None, headers: dict[str, str]) -> Provider:
    from app.providers.openai_responses import OpenAIResponsesProvider  # the SDK loads on first request

    return OpenAIResponsesProvider(provider_id, key, url, headers)


@dataclass(frozen=True, slots=True)
class NativeProvider:
    """A provider built in as OpenCode's are: called through its SDK with no provider block."""

    package: str  # the npm package a provider block may name and still mean this provider
    key_env: str  # the environment variable its key comes from (named when it is missing)
    create: Callable[[str, str | None, str | None, dict[str, str]], Provider]
    modules: tuple[str, ...]  # what its first request imports (``ProviderRegistry.first_use``)


NATIVE = {
    "anthropic": NativeProvider(
        ANTHROPIC_PACKAGE, "ANTHROPIC_API_KEY", _anthropic, ("app.providers.anthropic", "anthropic")
    ),
    "openai": NativeProvider(OPENAI_PACKAGE, "OPENAI_API_KEY", _openai, ("app.providers.openai_responses", "openai")),
}
OPENAI_COMPATIBLE_MODULES = ("app.providers.openai_compat",)


def load_modules(modules: tuple[str, ...]) -> None:
    """Import ``modules`` and run their ``warm()`` if they have one (a thread may do this)."""
    for name in modules:
        warm = getattr(importlib.import_module(name), "warm", None)
        if warm is not None:
            warm()


class ModelNotFoundError(LookupError):
    """OpenCode's ``ProviderModelNotFoundError``: the message carries the suggestions as OpenCode
    words it (``Model not found: p/m. Did you mean: a, b?``)."""

    def __init__(self, provider_id: str, model_id: str, suggestions: list[str] | None = None) -> None:
        self.provider_id = provider_id
        self.model_id = model_id
        self.suggestions = suggestions or []
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"Model not found: {provider_id}/{model_id}.{hint}")

    def to_named_error(self) -> dict[str, Any]:
        return {
            "name": "ProviderModelNotFoundError",
            "data": {"providerID": self.provider_id, "modelID": self.model_id, "suggestions": self.suggestions},
        }


@dataclass(frozen=True, slots=True)
class ModelRef:
    provider_id: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider_id}/{self.model_id}"


ECHO_REF = ModelRef(ECHO_MODEL.provider_id, ECHO_MODEL.model_id)


def _model_info(provider: ProviderConfig, model_id: str) -> ModelInfo:
    """The catalog's description of the model refined by its opencode.json entry; a malformed
    entry raises ``ConfigError``."""
    return model_info(provider.id, model_id, provider.models.get(model_id), npm=provider.npm, options=provider.options)


def _with_catalog(provider: ProviderConfig) -> ProviderConfig:
    """A configured provider completed from the catalog: its API package and URL when not
    configured (e.g. openrouter, deepseek, lmstudio), the key from its env var when not set."""
    known = catalog.providers().get(provider.id)
    if known is None:
        return provider
    key = provider.api_key or next((os.environ[e] for e in known.get("env", []) if os.environ.get(e)), None)
    return replace(
        provider,
        npm=provider.npm or known.get("npm"),
        base_url=provider.base_url or known.get("api") or DEFAULT_URLS.get(provider.id),
        api_key=key,
        name=provider.name if provider.name != provider.id else known.get("name", provider.id),
    )


def _catalog_models(provider_id: str) -> list[str]:
    return list((catalog.providers().get(provider_id) or {}).get("models", {}))


def _model_ids(provider: ProviderConfig) -> list[str]:
    """A provider's models as OpenCode lists them: the catalog's, then those only opencode.json
    declares."""
    known = _catalog_models(provider.id)
    catalogued = set(known)
    return known + [m for m in provider.models if m not in catalogued]


def _listed(provider_id: str, model_ids: list[str]) -> list[str]:
    """The ids OpenCode offers (and suggests): no deprecated or alpha models."""
    return [m for m in model_ids if (catalog.model(provider_id, m) or {}).get("status") not in UNLISTED_STATUSES]


def _needs_key(provider: ProviderConfig) -> bool:
    """A hosted catalog provider (its catalog entry names key variables) refuses calls without a
    key; a server on this machine (LM Studio, a proxy) may need none."""
    env = (catalog.providers().get(provider.id) or {}).get("env")
    return bool(env) and urlsplit(provider.base_url or "").hostname not in LOCAL_HOSTS


def _family(model_id: str, family: str) -> str:
    """A model's family as models.dev names it; the shipped snapshot has none, so the small
    families are recognized by name then (``gpt-5-nano``, ``claude-3.5-haiku``, ``gemini-2.5-flash``;
    not ``flash-lite`` or media models, which models.dev files under other families)."""
    if family:
        return family
    name = model_id.lower().rsplit("/", 1)[-1]
    if any(word in name for word in ("image", "tts", "audio", "live", "embedding", "lite")):
        return ""
    for wanted, words in (
        ("gpt-nano", ("gpt", "nano")),
        ("gpt-mini", ("gpt", "mini")),
        ("claude-haiku", ("claude", "haiku")),
        ("gemini-flash", ("gemini", "flash")),
    ):
        if all(word in name for word in words):
            return wanted
    return ""


@functools.cache
def _catalog_env_names() -> tuple[str, ...]:
    return tuple(name for p in catalog.providers().values() for name in p.get("env", []))


def _env_stamp(config: OpenCodeConfig) -> tuple[str | None, ...]:
    """The values of every variable a provider key may come from: connections change with them."""
    names = list(_catalog_env_names())
    for spec in (config.raw.get("provider") or {}).values():
        env = spec.get("env") if isinstance(spec, dict) else None
        names += [name for name in env if isinstance(name, str)] if isinstance(env, list) else []
    return tuple(os.environ.get(name) for name in names)


def env_connected(provider_id: str) -> bool:
    """A catalog provider whose API key variable is set (OpenCode's ``source: "env"``)."""
    known = catalog.providers().get(provider_id) or {}
    return any(os.environ.get(name) for name in known.get("env", []))


def _bare(provider_id: str) -> ProviderConfig:
    """A catalog provider with nothing configured, completed from the catalog."""
    return _with_catalog(ProviderConfig(provider_id, None, provider_id, None, None, {}))


@dataclass(slots=True)
class _View:
    """A directory's providers under one opencode.json, credentials file and environment. Turns
    reuse it (and the models resolved through it) until one of the three changes."""

    config: OpenCodeConfig
    stamp: tuple[Any, ...]
    connected: dict[str, tuple[ProviderConfig, str]]
    resolved: dict[ModelRef, tuple[Provider, ModelInfo]] = field(default_factory=dict)
    small: dict[str, ModelRef | None] = field(default_factory=dict)


class ProviderRegistry:
    def __init__(self, config: ConfigLoader, credentials: Credentials | None = None) -> None:
        self._config = config
        self.credentials = credentials or Credentials(Path(default_data_dir()) / "auth.json")
        self._echo = EchoProvider()
        self._clients: dict[tuple[Any, ...], Provider] = {}
        self._views: dict[str, _View] = {}

    def _view(self, directory: str) -> _View:
        """The directory's view, checked against the credentials file and the environment once
        per configuration ``reading`` (a stat and a hundred variables each time)."""
        return memoized((self, directory), lambda: self._current_view(directory))

    def _current_view(self, directory: str) -> _View:
        config = self._config.load(directory)
        stamp = (self.credentials.version(), _env_stamp(config))
        view = self._views.get(directory)
        if view is None or view.config is not config or view.stamp != stamp:
            view = self._views[directory] = _View(config, stamp, self._connect(config))
        return view

    def _connect(self, config: OpenCodeConfig) -> dict[str, tuple[ProviderConfig, str]]:
        """Connected providers with their source, in OpenCode's order (a later source wins): a
        catalog provider whose key variable is set (``env``), one with a key saved by
        ``PUT /auth/:id`` (``api``), one configured in opencode.json (``config``)."""
        result: dict[str, tuple[ProviderConfig, str]] = {}
        for pid in catalog.providers():
            if env_connected(pid):
                result[pid] = (_bare(pid), "env")
        for pid in self.credentials.all():
            if pid in catalog.providers() and self.credentials.api_key(pid):
                result[pid] = (_bare(pid), "api")
        for pid, provider in config.providers.items():
            result[pid] = (_with_catalog(provider), "config")
        return result

    def _connected(self, directory: str) -> dict[str, tuple[ProviderConfig, str]]:
        return self._view(directory).connected

    def _configured(self, directory: str) -> dict[str, ProviderConfig]:
        """The connected providers this server can call (OpenAI's API at a known URL)."""
        return {
            pid: p
            for pid, (p, _source) in self._connected(directory).items()
            if p.npm in OPENAI_COMPATIBLE_PACKAGES and p.base_url
        }

    def default_model(self, directory: str) -> ModelRef:
        configured = self._config.load(directory).model
        if configured and "/" in configured:
            provider_id, model_id = configured.split("/", 1)
            return ModelRef(provider_id, model_id)
        return ECHO_REF

    def first_use(self, directory: str) -> tuple[str, ...]:
        """The modules the first turn on ``directory``'s default model imports (its client, its
        SDK): loaded on a thread while the server is idle after start-up (``load_modules``),
        they no longer stall the event loop, and every request on it, during that turn."""
        ref = self.default_model(directory)
        if ref == ECHO_REF:
            return ()
        native = NATIVE.get(ref.provider_id)
        return ("app.providers.catalog", *(native.modules if native is not None else OPENAI_COMPATIBLE_MODULES))

    def resolve(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        """The client and description of a model; a model no connected provider offers raises
        ``ModelNotFoundError`` with OpenCode's suggestions. Cached until opencode.json, the saved
        credentials or the key variables change, so a key saved with PUT /auth is used from the
        next turn on."""
        if ref == ECHO_REF:
            return self._echo, ECHO_MODEL
        view = self._view(directory)
        found = view.resolved.get(ref)
        if found is None:
            found = view.resolved[ref] = self._resolve(directory, view, ref)
        return found

    def _resolve(self, directory: str, view: _View, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        native = self._resolve_native(directory, ref)
        if native is not None:
            return native
        provider = self._configured(directory).get(ref.provider_id)
        if provider is None or (ref.model_id not in provider.models and not catalog.model(provider.id, ref.model_id)):
            raise self._not_found(view, ref)
        # opencode.json apiKey, else the saved key, else the environment.
        env_vars = self._env_vars(directory, provider.id)
        api_key = self.credentials.key_for(provider.id, provider.api_key, env_vars)
        missing = (
            missing_key_message(provider.name, provider.id, env_vars) if not api_key and _needs_key(provider) else None
        )
        key = (provider.id, provider.base_url, api_key, tuple(sorted(provider.headers.items())), missing)
        client = self._clients.get(key)
        if client is None:
            assert provider.base_url is not None
            # Imported on first use: httpx is not needed to serve the offline model (start-up time).
            from app.providers.openai_compat import OpenAICompatibleProvider

            client = self._clients[key] = OpenAICompatibleProvider(
                provider.id, provider.base_url, api_key, provider.headers, missing_key=missing
            )
        return client, _model_info(provider, ref.model_id)

    def _not_found(self, view: _View, ref: ModelRef) -> ModelNotFoundError:
        """OpenCode's suggestions: for a known provider, its closest model ids (a connected
        provider's own list first, then the catalog's); for an unknown one, the closest provider
        ids."""
        pid = ref.provider_id
        connected = view.connected.get(pid)
        suggestions: list[str] = []
        if connected is not None:
            suggestions = model_suggestions(ref.model_id, _listed(pid, _model_ids(connected[0])))
        if not suggestions and pid in catalog.providers():
            suggestions = model_suggestions(ref.model_id, _listed(pid, _catalog_models(pid)))
        if connected is None and pid not in catalog.providers():
            suggestions = fuzzy(pid, [ECHO_MODEL.provider_id, *view.connected, *catalog.providers()])
        return ModelNotFoundError(pid, ref.model_id, [s for s in suggestions if s != ref.model_id])

    def small_model(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        """The model for small jobs (session titles) of a turn on ``ref``: ``small_model`` from
        opencode.json, else the provider's newest model of OpenCode's small families, else
        ``ref`` itself (also when the small one cannot be resolved)."""
        view = self._view(directory)
        if ref.provider_id not in view.small:
            view.small[ref.provider_id] = self._pick_small(view, ref.provider_id)
        small = view.small[ref.provider_id]
        if small is not None:
            try:
                return self.resolve(directory, small)
            except (ModelNotFoundError, ConfigError):
                pass
        return self.resolve(directory, ref)

    def _pick_small(self, view: _View, provider_id: str) -> ModelRef | None:
        configured = view.config.raw.get("small_model")
        if isinstance(configured, str) and "/" in configured:
            return ModelRef(*configured.split("/", 1))
        connected = view.connected.get(provider_id)
        if connected is None or provider_id in NO_SMALL_MODEL:
            return None
        if provider_id.startswith("opencode"):
            families: tuple[str, ...] = ("gpt-nano",)
        elif provider_id.startswith("github-copilot"):
            families = ("gpt-mini", *SMALL_FAMILIES)
        else:
            families = SMALL_FAMILIES
        described: list[tuple[str, str, str]] = []  # (release date, id, family)
        for mid in _listed(provider_id, _model_ids(connected[0])):
            try:
                info = _model_info(connected[0], mid)
            except ConfigError:  # a malformed entry is reported when that model is used
                continue
            described.append((info.release_date, mid, _family(mid, info.family)))
        newest_first = sorted(described, reverse=True)
        for family in families:
            match = next((mid for _date, mid, fam in newest_first if fam == family), None)
            if match is not None:
                return ModelRef(provider_id, match)
        return None

    def _env_vars(self, directory: str, provider_id: str) -> list[str]:
        """The environment variables a provider's key may come from: ``provider.<id>.env`` in
        opencode.json (as in OpenCode's provider schema), then the catalog's for that provider."""
        spec = (self._config.load(directory).raw.get("provider") or {}).get(provider_id) or {}
        env = spec.get("env") if isinstance(spec, dict) else None
        configured = [name for name in env if isinstance(name, str)] if isinstance(env, list) else []
        known = (catalog.providers().get(provider_id) or {}).get("env", [])
        return configured + [name for name in known if isinstance(name, str) and name not in configured]

    # -- native providers (built in: no provider block needed) -------------------------------------

    def _resolve_native(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo] | None:
        """``anthropic/<model>`` and ``openai/<model>`` through their official SDKs, unless
        opencode.json declares a block for that provider with another package. Key:
        ``options.apiKey``, else a stored one, else the environment (a missing key fails the turn
        with a ProviderAuthError naming the variable); ``options.baseURL``, else the SDK's own
        ``*_BASE_URL`` handling. Limits and prices come from the catalog, refined by the block's
        model entry."""
        native = NATIVE.get(ref.provider_id)
        if native is None:
            return None
        block = self._config.load(directory).providers.get(ref.provider_id)
        if block is not None and block.npm not in (None, native.package):
            return None
        env_vars = [*self._env_vars(directory, ref.provider_id), native.key_env]
        api_key = self.credentials.key_for(ref.provider_id, block.api_key if block else None, env_vars)
        base_url = block.base_url if block else None
        headers = block.headers if block else {}
        key = (ref.provider_id, "native", base_url, api_key, tuple(sorted(headers.items())))
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = native.create(ref.provider_id, api_key, base_url, headers)
        entry = block.models.get(ref.model_id) if block else None
        options = block.options if block else None
        return client, model_info(ref.provider_id, ref.model_id, entry, npm=native.package, options=options)

    def _echo_entry(self) -> dict[str, Any]:
        return {
            "id": ECHO_MODEL.provider_id,
            "name": "opensession",
            "source": "custom",
            "env": [],
            "options": {},
            "models": {ECHO_MODEL.model_id: model_entry(ECHO_MODEL, None, None)},
        }

    def _entry(self, provider: ProviderConfig, source: str) -> dict[str, Any]:
        """A provider in OpenCode's ``Provider`` shape: its catalog models, then models only
        opencode.json declares, each merged with its opencode.json entry."""
        models = {
            mid: model_entry(_model_info(provider, mid), provider.base_url, provider.npm, mid)
            for mid in _model_ids(provider)
        }
        env = (catalog.providers().get(provider.id) or {}).get("env", [])
        return {"id": provider.id, "name": provider.name, "source": source, "env": env, "options": {}, "models": models}

    def catalog(self, directory: str) -> list[dict[str, Any]]:
        """Every connected provider with its models (``GET /config/providers``); a malformed model
        entry in opencode.json raises ``ConfigError``."""
        return [self._echo_entry()] + [self._entry(p, source) for p, source in self._connected(directory).values()]

    def all_providers(self, directory: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Every known provider (connected ones and the rest of the catalog) and the connected ids
        (``GET /provider``)."""
        connected = self.catalog(directory)
        ids = {p["id"] for p in connected}
        rest = [self._entry(_bare(pid), "custom") for pid in catalog.providers() if pid not in ids]
        return connected + rest, [p["id"] for p in connected]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        self._views.clear()  # they hold the clients just closed
