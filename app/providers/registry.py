"""Which model answers a prompt: the built-in echo model, the native providers (Anthropic's and
OpenAI's APIs through their SDKs, with no provider block needed) and every OpenAI-compatible
provider declared in the directory's opencode.json. Provider clients are cached so connections
are reused across turns."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.config import ConfigLoader, ProviderConfig
from app.providers import catalog
from app.providers.base import ModelInfo, Provider
from app.providers.credentials import Credentials
from app.providers.echo import ECHO_MODEL, EchoProvider
from app.providers.models import model_entry, model_info
from app.providers.options import ANTHROPIC_PACKAGE, OPENAI_PACKAGE
from app.settings import default_data_dir

OPENAI_COMPATIBLE_PACKAGES = {"@ai-sdk/openai-compatible", "@ai-sdk/openai", None}
# Catalog providers speaking OpenAI's API whose models.dev entry names no URL.
DEFAULT_URLS = {"openai": "https://api.openai.com/v1"}


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


NATIVE = {
    "anthropic": NativeProvider(ANTHROPIC_PACKAGE, "ANTHROPIC_API_KEY", _anthropic),
    "openai": NativeProvider(OPENAI_PACKAGE, "OPENAI_API_KEY", _openai),
}


class ModelNotFoundError(LookupError):
    def __init__(self, provider_id: str, model_id: str) -> None:
        super().__init__(f"Model not found: {provider_id}/{model_id}")
        self.provider_id = provider_id
        self.model_id = model_id


@dataclass(frozen=True, slots=True)
class ModelRef:
    provider_id: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider_id}/{self.model_id}"


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


def env_connected(provider_id: str) -> bool:
    """A catalog provider whose API key variable is set (OpenCode's ``source: "env"``)."""
    known = catalog.providers().get(provider_id) or {}
    return any(os.environ.get(name) for name in known.get("env", []))


class ProviderRegistry:
    def __init__(self, config: ConfigLoader, credentials: Credentials | None = None) -> None:
        self._config = config
        self.credentials = credentials or Credentials(Path(default_data_dir()) / "auth.json")
        self._echo = EchoProvider()
        self._clients: dict[tuple[Any, ...], Provider] = {}

    def _connected(self, directory: str) -> dict[str, tuple[ProviderConfig, str]]:
        """Connected providers with their source: configured in opencode.json (``config``), or a
        catalog provider whose API key variable is set (``env``), completed from the catalog."""
        result: dict[str, tuple[ProviderConfig, str]] = {}
        for pid in catalog.providers():
            if env_connected(pid):
                result[pid] = (_with_catalog(ProviderConfig(pid, None, pid, None, None, {})), "env")
        for pid, provider in self._config.load(directory).providers.items():
            result[pid] = (_with_catalog(provider), "config")
        return result

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
        return ModelRef(ECHO_MODEL.provider_id, ECHO_MODEL.model_id)

    def resolve(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        if (ref.provider_id, ref.model_id) == (ECHO_MODEL.provider_id, ECHO_MODEL.model_id):
            return self._echo, ECHO_MODEL
        native = self._resolve_native(directory, ref)
        if native is not None:
            return native
        provider = self._configured(directory).get(ref.provider_id)
        if provider is None or (ref.model_id not in provider.models and not catalog.model(provider.id, ref.model_id)):
            raise ModelNotFoundError(ref.provider_id, ref.model_id)
        # opencode.json apiKey, else the saved key, else the environment;
        # read per resolve, so a key saved with PUT /auth is used from the next turn on.
        api_key = self.credentials.key_for(provider.id, provider.api_key, self._env_vars(directory, provider.id))
        key = (provider.id, provider.base_url, api_key, tuple(sorted(provider.headers.items())))
        client = self._clients.get(key)
        if client is None:
            assert provider.base_url is not None
            # Imported on first use: httpx is not needed to serve the offline model (start-up time).
            from app.providers.openai_compat import OpenAICompatibleProvider

            client = self._clients[key] = OpenAICompatibleProvider(
                provider.id, provider.base_url, api_key, provider.headers
            )
        return client, _model_info(provider, ref.model_id)

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
        known = _catalog_models(provider.id)
        ids = known + [m for m in provider.models if m not in set(known)]
        models = {mid: model_entry(_model_info(provider, mid), provider.base_url, provider.npm, mid) for mid in ids}
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
        rest = [
            self._entry(_with_catalog(ProviderConfig(pid, None, pid, None, None, {})), "custom")
            for pid in catalog.providers()
            if pid not in ids
        ]
        return connected + rest, [p["id"] for p in connected]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
