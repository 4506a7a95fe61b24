"""Which model answers a prompt: the built-in echo model plus every OpenAI-compatible provider
declared in the directory's opencode.json. Provider clients are cached so connections are
reused across turns."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from app.config import ConfigLoader, ProviderConfig
from app.providers.base import ModelInfo, Provider
from app.providers.echo import ECHO_MODEL, EchoProvider

ANTHROPIC_PROVIDER_ID = "anthropic"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
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
    def __init__(self, config: ConfigLoader) -> None:
        self._config = config
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
        native = self._resolve_native_anthropic(directory, ref)
        if native is not None:
            return native
        provider = self._configured(directory).get(ref.provider_id)
        if provider is None or ref.model_id not in provider.models:
            raise ModelNotFoundError(ref.provider_id, ref.model_id)
        key = (provider.id, provider.base_url, provider.api_key, tuple(sorted(provider.headers.items())))
        client = self._clients.get(key)
        if client is None:
            assert provider.base_url is not None
            # Imported on first use: httpx is not needed to serve the offline model (start-up time).
            from app.providers.openai_compat import OpenAICompatibleProvider

            client = self._clients[key] = OpenAICompatibleProvider(
                provider.id, provider.base_url, provider.api_key, provider.headers
            )
        return client, _model_info(provider, ref.model_id)

    # -- native Anthropic (built in: no provider block needed) ------------------------------------

    def _resolve_native_anthropic(self, directory: str, ref: ModelRef) -> tuple[Provider, ModelInfo] | None:
        """``anthropic/<model>`` through the Anthropic SDK, unless opencode.json declares an
        ``anthropic`` block for another package. Key: ``options.apiKey``, else ANTHROPIC_API_KEY
        (a missing key fails the turn with a ProviderAuthError naming it); ``options.baseURL``,
        else the SDK's own ANTHROPIC_BASE_URL handling. Limits and prices are placeholders unless
        the block's model entry gives them."""
        if ref.provider_id != ANTHROPIC_PROVIDER_ID:
            return None
        block = self._config.load(directory).providers.get(ANTHROPIC_PROVIDER_ID)
        if block is not None and block.npm not in (None, "@ai-sdk/anthropic"):
            return None
        api_key = (block.api_key if block else None) or os.environ.get(ANTHROPIC_KEY_ENV) or None
        base_url = block.base_url if block else None
        headers = block.headers if block else {}
        key = (ANTHROPIC_PROVIDER_ID, "native", base_url, api_key, tuple(sorted(headers.items())))
        client = self._clients.get(key)
        if client is None:
            from app.providers.anthropic import AnthropicProvider  # the SDK loads on first request

            client = self._clients[key] = AnthropicProvider(ANTHROPIC_PROVIDER_ID, api_key, base_url, headers)
        if block is not None and ref.model_id in block.models:
            info = _model_info(block, ref.model_id)
        else:
            info = ModelInfo(ANTHROPIC_PROVIDER_ID, ref.model_id, ref.model_id, 200_000, 32_000)
        return client, info

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
