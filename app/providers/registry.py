"""Which model answers a prompt: the built-in echo model plus every OpenAI-compatible provider
declared in the directory's opencode.json. Provider clients are cached so connections are
reused across turns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import ConfigLoader, ProviderConfig
from app.providers.base import ModelInfo, Provider
from app.providers.credentials import Credentials
from app.providers.echo import ECHO_MODEL, EchoProvider
from app.settings import default_data_dir

OPENAI_COMPATIBLE_PACKAGES = {"@ai-sdk/openai-compatible", "@ai-sdk/openai", None}


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
    spec = provider.models.get(model_id, {})
    limit = spec.get("limit") or {}
    cost = spec.get("cost") or {}
    return ModelInfo(
        provider_id=provider.id,
        model_id=spec.get("id", model_id) if isinstance(spec.get("id"), str) else model_id,
        name=spec.get("name") or model_id,
        context_limit=int(limit.get("context") or 128_000),
        output_limit=int(limit.get("output") or 4_096),
        cost_input=float(cost.get("input") or 0),
        cost_output=float(cost.get("output") or 0),
    )


def _model_entry(info: ModelInfo, url: str | None) -> dict[str, Any]:
    """A model as ``GET /config/providers`` describes it (the fields OpenCode clients read)."""
    return {
        "id": info.model_id,
        "providerID": info.provider_id,
        "api": {"id": info.model_id, "url": url or "", "npm": "@ai-sdk/openai-compatible"},
        "name": info.name,
        "capabilities": {
            "temperature": True,
            "reasoning": True,
            "attachment": False,
            "toolcall": True,
            "input": {"text": True, "audio": False, "image": False, "video": False, "pdf": False},
            "output": {"text": True, "audio": False, "image": False, "video": False, "pdf": False},
            "interleaved": False,
        },
        "cost": {"input": info.cost_input, "output": info.cost_output, "cache": {"read": 0, "write": 0}},
        "limit": {"context": info.context_limit, "output": info.output_limit},
        "status": "active",
        "options": {},
        "headers": {},
        "release_date": "2026-01-01",
        "variants": {},
    }


class ProviderRegistry:
    def __init__(self, config: ConfigLoader, credentials: Credentials | None = None) -> None:
        self._config = config
        # -- credentials (PUT /auth/{providerID}): begin --
        self.credentials = credentials or Credentials(Path(default_data_dir()) / "auth.json")
        # -- credentials: end --
        self._echo = EchoProvider()
        self._clients: dict[tuple[Any, ...], Provider] = {}

    def _configured(self, directory: str) -> dict[str, ProviderConfig]:
        providers = self._config.load(directory).providers
        return {pid: p for pid, p in providers.items() if p.npm in OPENAI_COMPATIBLE_PACKAGES and p.base_url}

    def default_model(self, directory: str) -> ModelRef:
        configured = self._config.load(directory).model
        if configured and "/" in configured:
            provider_id, model_id = configured.split("/", 1)
            return ModelRef(provider_id, model_id)
        return ModelRef(ECHO_MODEL.provider_id, ECHO_MODEL.model_id)

    def resolve(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo]:
        if (ref.provider_id, ref.model_id) == (ECHO_MODEL.provider_id, ECHO_MODEL.model_id):
            return self._echo, ECHO_MODEL
        provider = self._configured(directory).get(ref.provider_id)
        if provider is None or ref.model_id not in provider.models:
            raise ModelNotFoundError(ref.provider_id, ref.model_id)
        # -- credentials: begin -- opencode.json apiKey, else the saved key, else the environment;
        # read per resolve, so a key saved with PUT /auth is used from the next turn on.
        api_key = self.credentials.key_for(provider.id, provider.api_key, self._env_vars(directory, provider.id))
        # -- credentials: end --
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

    # -- credentials: begin --
    def _env_vars(self, directory: str, provider_id: str) -> list[str]:
        """The environment variables a provider's key may come from: ``provider.<id>.env`` in
        opencode.json (as in OpenCode's provider schema)."""
        spec = (self._config.load(directory).raw.get("provider") or {}).get(provider_id) or {}
        env = spec.get("env") if isinstance(spec, dict) else None
        return [name for name in env if isinstance(name, str)] if isinstance(env, list) else []

    # -- credentials: end --

    def catalog(self, directory: str) -> list[dict[str, Any]]:
        """Every usable provider with its models, in OpenCode's ``Provider`` shape."""
        echo = {
            "id": ECHO_MODEL.provider_id,
            "name": "opensession",
            "source": "custom",
            "env": [],
            "options": {},
            "models": {ECHO_MODEL.model_id: _model_entry(ECHO_MODEL, None)},
        }
        result = [echo]
        for provider in self._configured(directory).values():
            models = {mid: _model_entry(_model_info(provider, mid), provider.base_url) for mid in provider.models}
            result.append(
                {
                    "id": provider.id,
                    "name": provider.name,
                    "source": "config",
                    "env": [],
                    "options": {},
                    "models": models,
                }
            )
        return result

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
