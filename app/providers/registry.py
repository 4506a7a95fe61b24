"""Which model answers a prompt: the built-in echo model, or any provider of the models.dev
catalog or of the directory's opencode.json whose API is Anthropic's, OpenAI's Responses or
OpenAI-compatible chat completions (``WIRES``), by name with a key and no provider block, as in
OpenCode. Provider clients are cached per connection so connections are reused across turns."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.config import ConfigError, ConfigLoader, OpenCodeConfig, ProviderConfig, memoized
from app.providers import catalog
from app.providers.base import ChatRequest, ModelInfo, Provider, ProviderError, StreamEvent
from app.providers.connection import Connection, timeout_seconds
from app.providers.credentials import CredentialFile, Credentials
from app.providers.echo import ECHO_MODEL, EchoProvider
from app.providers.models import model_entry, model_info
from app.providers.options import ANTHROPIC_PACKAGE, COMPATIBLE_PACKAGE, GOOGLE_PACKAGE, OPENAI_PACKAGE
from app.providers.suggest import fuzzy, model_suggestions
from app.settings import default_data_dir

# OpenCode's small-model families, most wanted first (``Provider.getSmallModel``), and the
# providers it never picks one for (their deployments are not known from the catalog).
SMALL_FAMILIES = ("gemini-flash", "gpt-nano", "claude-haiku")
NO_SMALL_MODEL = frozenset({"azure", "azure-cognitive-services"})
UNLISTED_STATUSES = ("deprecated", "alpha")  # models OpenCode leaves out of a provider's list
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _anthropic(connection: Connection) -> Provider:
    from app.providers.anthropic import AnthropicProvider  # the SDK loads on first request

    return AnthropicProvider(connection)


def _openai(connection: Connection) -> Provider:
    from app.providers.openai_responses import OpenAIResponsesProvider  # the SDK loads on first request

    return OpenAIResponsesProvider(connection)


def _chat(connection: Connection) -> Provider:
    # Imported on first use: httpx is not needed to serve the offline model (start-up time).
    from app.providers.openai_compat import OpenAICompatibleProvider

    return OpenAICompatibleProvider(connection)


@dataclass(frozen=True, slots=True)
class Wire:
    """How the models of one AI SDK package (a provider's ``npm`` in the catalog or opencode.json)
    are called here: which client, at which URL when none is configured. ``suffix`` is appended
    to the URL (configured or default) where this server calls another endpoint of the API than
    OpenCode's package does: Gemini's and DeepInfra's OpenAI-compatible ones."""

    create: Callable[[Connection], Provider]
    modules: tuple[str, ...]  # what its first request imports (``ProviderRegistry.first_use``)
    default_url: str | None = None  # None: the SDK's own default, or the catalog's ``api``
    suffix: str = ""
    # Called through the API owner's SDK: the API is the authority on model ids (a model newer
    # than the catalog works at once), and a key is always needed (the SDK sends none otherwise).
    native: bool = False


_ANTHROPIC_MODULES = ("app.providers.anthropic", "anthropic")
_OPENAI_MODULES = ("app.providers.openai_responses", "openai")
_CHAT_MODULES = ("app.providers.openai_compat",)


def _chat_at(url: str | None, suffix: str = "") -> Wire:
    return Wire(_chat, _CHAT_MODULES, url, suffix)


# Every package of the catalog whose API is Anthropic's, OpenAI's Responses or OpenAI's chat
# completions (the providers' own packages in OpenCode, but the same API at these URLs). Not
# here, and refused with a clear error: Bedrock, Vertex, Azure, SAP AI Core, GitLab and
# Cloudflare's gateway, which sign or route requests their own way.
WIRES: dict[str | None, Wire] = {
    ANTHROPIC_PACKAGE: Wire(_anthropic, _ANTHROPIC_MODULES, native=True),
    OPENAI_PACKAGE: Wire(_openai, _OPENAI_MODULES, native=True),
    COMPATIBLE_PACKAGE: _chat_at(None),
    None: _chat_at(None),  # a provider block without ``npm`` (OpenCode's default is the above)
    "@openrouter/ai-sdk-provider": _chat_at("https://openrouter.ai/api/v1"),
    "@ai-sdk/groq": _chat_at("https://api.groq.com/openai/v1"),
    "@ai-sdk/mistral": _chat_at("https://api.mistral.ai/v1"),
    "@ai-sdk/xai": _chat_at("https://api.x.ai/v1"),
    "@ai-sdk/cerebras": _chat_at("https://api.cerebras.ai/v1"),
    "@ai-sdk/togetherai": _chat_at("https://api.together.xyz/v1"),
    "@ai-sdk/deepinfra": _chat_at("https://api.deepinfra.com/v1", "/openai"),
    "@ai-sdk/perplexity": _chat_at("https://api.perplexity.ai"),
    "@ai-sdk/vercel": _chat_at("https://api.v0.dev/v1"),
    "@ai-sdk/gateway": _chat_at("https://ai-gateway.vercel.sh/v1"),
    "@ai-sdk/cohere": _chat_at("https://api.cohere.ai/compatibility/v1"),
    GOOGLE_PACKAGE: _chat_at("https://generativelanguage.googleapis.com/v1beta", "/openai"),
    "venice-ai-sdk-provider": _chat_at("https://api.venice.ai/api/v1"),
    "@aihubmix/ai-sdk-provider": _chat_at("https://aihubmix.com/v1"),
}


class _Failing:
    """The client of a provider this server cannot call: every request fails with an error
    saying why (the turn reports it; nothing else breaks)."""

    def __init__(self, provider_id: str, reason: str) -> None:
        self.id = provider_id
        self._message = f"opensession cannot call provider {provider_id!r}: {reason}"

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        for event in self._fail():  # raised where a stream's first event would arrive
            yield event

    def _fail(self) -> tuple[StreamEvent, ...]:
        raise ProviderError(self._message, name="ProviderInitError", provider_id=self.id)

    async def aclose(self) -> None:
        return None


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
    configured (e.g. openrouter, deepseek, lmstudio). Its key is looked up per connection, in
    OpenCode's order (``_connection``)."""
    known = catalog.providers().get(provider.id)
    if known is None:
        return provider
    return replace(
        provider,
        npm=provider.npm or known.get("npm"),
        base_url=provider.base_url or known.get("api"),
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


def _needs_key(provider_id: str, url: str | None) -> bool:
    """A hosted catalog provider (its catalog entry names key variables) refuses calls without a
    key; a server on this machine (LM Studio, a proxy) may need none."""
    env = (catalog.providers().get(provider_id) or {}).get("env")
    return bool(env) and urlsplit(url or "").hostname not in LOCAL_HOSTS


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
    for provider in config.providers.values():
        names += provider.env
    return tuple(os.environ.get(name) for name in names)


def env_connected(provider_id: str) -> bool:
    """A catalog provider whose API key variable is set (OpenCode's ``source: "env"``)."""
    known = catalog.providers().get(provider_id) or {}
    return any(os.environ.get(name) for name in known.get("env", []))


def _bare(provider_id: str) -> ProviderConfig:
    """A catalog provider with nothing configured, completed from the catalog."""
    return _with_catalog(ProviderConfig(provider_id, None, provider_id, None, None, {}))


def _provider_entry(provider: ProviderConfig, source: str) -> dict[str, Any]:
    """A provider in OpenCode's ``Provider`` shape: its catalog models, then models only
    opencode.json declares, each merged with its opencode.json entry."""
    models = {
        mid: model_entry(_model_info(provider, mid), provider.base_url, provider.npm, mid)
        for mid in _model_ids(provider)
    }
    env = (catalog.providers().get(provider.id) or {}).get("env", [])
    return {"id": provider.id, "name": provider.name, "source": source, "env": env, "options": {}, "models": models}


@functools.cache
def _unconnected_entry(provider_id: str) -> dict[str, Any]:
    """A catalog provider nothing connects, as ``GET /provider`` lists it: the same until the
    process ends (the catalog is), and thousands of models in all, so built once, on the first
    listing; read-only."""
    return _provider_entry(_bare(provider_id), "custom")


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
        self.credentials = credentials or Credentials(CredentialFile(Path(default_data_dir()) / "auth.json"))
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

    def default_model(self, directory: str) -> ModelRef:
        configured = self._config.load(directory).model
        if configured and "/" in configured:
            provider_id, model_id = configured.split("/", 1)
            return ModelRef(provider_id, model_id)
        return ECHO_REF

    def first_use(self, directory: str) -> Callable[[], None]:
        """What loads, on a thread while the server is idle after start-up, what the first
        requests would otherwise load on the event loop, stalling every request on it: the
        catalog (clients ask for providers at once), then the client and SDK of ``directory``'s
        default model. Nothing is read here: the catalog's parsing is what is put off. The
        listing of every catalog provider (``GET /provider``, 0.3 s of CPU) is built on first
        use instead: most servers are never asked for it, and every start would pay for it."""
        ref = self.default_model(directory)
        block = self._config.load(directory).providers.get(ref.provider_id)
        configured_npm = block.npm if block is not None else None

        def load() -> None:
            catalog.warm()
            if ref == ECHO_REF:
                return
            npm = configured_npm or (catalog.providers().get(ref.provider_id) or {}).get("npm")
            wire = WIRES.get(npm)
            if wire is not None:
                load_modules(wire.modules)

        return load

    def resolve(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        """The client and description of a model; a model no known provider offers raises
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
        """A connected provider's model, or a catalog provider's that is not connected yet (its
        requests then fail naming the missing key, not as an unknown model). Providers whose API
        is the authority on model ids (Anthropic's, OpenAI's) take any id; the others take the
        catalog's and opencode.json's."""
        connected = view.connected.get(ref.provider_id)
        if connected is not None:
            provider = connected[0]
        elif ref.provider_id in catalog.providers():
            provider = _bare(ref.provider_id)
        else:
            raise self._not_found(view, ref)
        wire = WIRES.get(provider.npm)
        known = ref.model_id in provider.models or catalog.model(provider.id, ref.model_id) is not None
        if not known and not (wire is not None and wire.native):
            raise self._not_found(view, ref)
        return self._client(directory, provider, wire), _model_info(provider, ref.model_id)

    def _client(self, directory: str, provider: ProviderConfig, wire: Wire | None) -> Provider:
        """The provider's client, made once per connection and reused across turns."""
        if wire is None:
            reason = f"its API ({provider.npm}) is not Anthropic's, OpenAI's or OpenAI-compatible chat completions"
            return _Failing(provider.id, reason)
        connection = self._connection(directory, provider, wire)
        if connection.base_url is None and wire.create is _chat:
            return _Failing(provider.id, f"provider.{provider.id}.options.baseURL is not set in opencode.json")
        key = (wire.create, connection)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = wire.create(connection)
        return client

    def _connection(self, directory: str, provider: ProviderConfig, wire: Wire) -> Connection:
        """Key: opencode.json's ``apiKey``, else the saved key, else the environment; URL:
        ``baseURL``, else the catalog's, else the package's default (then the API's suffix)."""
        env_vars = self._env_vars(directory, provider.id)
        options = provider.options if isinstance(provider.options, dict) else {}
        url = provider.base_url or wire.default_url
        return Connection(
            provider_id=provider.id,
            name=provider.name,
            base_url=url.rstrip("/") + wire.suffix if url else None,
            api_key=self.credentials.key_for(provider.id, provider.api_key, env_vars),
            headers=tuple(sorted(provider.headers.items())),
            timeout_s=timeout_seconds(provider.id, options),
            key_env=tuple(env_vars),
            needs_key=wire.native or _needs_key(provider.id, url),
        )

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
        configured = view.config.small_model
        if configured and "/" in configured:
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
        provider = self._config.load(directory).providers.get(provider_id)
        configured = list(provider.env) if provider is not None else []
        known = (catalog.providers().get(provider_id) or {}).get("env", [])
        return configured + [name for name in known if isinstance(name, str) and name not in configured]

    def _echo_entry(self) -> dict[str, Any]:
        return {
            "id": ECHO_MODEL.provider_id,
            "name": "opensession",
            "source": "custom",
            "env": [],
            "options": {},
            "models": {ECHO_MODEL.model_id: model_entry(ECHO_MODEL, None, None)},
        }

    def catalog(self, directory: str) -> list[dict[str, Any]]:
        """Every connected provider with its models (``GET /config/providers``); a malformed model
        entry in opencode.json raises ``ConfigError``."""
        return [self._echo_entry()] + [_provider_entry(p, source) for p, source in self._connected(directory).values()]

    def all_providers(self, directory: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Every known provider (connected ones and the rest of the catalog) and the connected ids
        (``GET /provider``)."""
        connected = self.catalog(directory)
        ids = {p["id"] for p in connected}
        rest = [_unconnected_entry(pid) for pid in catalog.providers() if pid not in ids]
        return connected + rest, [p["id"] for p in connected]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        self._views.clear()  # they hold the clients just closed
