"""A model's description (``ModelInfo``) from the shipped catalog merged with the model's entry in
opencode.json (``provider.<id>.models.<id>``), field by field as OpenCode merges a configured
model over its models.dev entry: a configured field wins, else the catalog's, else a default.
The entry's ``id`` names the catalog model it refines (and the id sent to the API).

The entry's ``options``, ``headers`` and ``variants`` (and the provider block's ``options``) are
carried on the model for the call's settings (``app.providers.options``); the model's variants are
those OpenCode generates for it, refined by the configured ones.

A malformed override (``"limit": "big"``, ``"cost": {"input": "x"}``, ``"options": 3``) raises
``ConfigError`` naming the field, so the request that needs the model gets a clear error."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.config import ConfigError
from app.providers import catalog
from app.providers.base import ModelInfo, Prices
from app.providers.options import COMPATIBLE_PACKAGE, configured_variants, generated_variants, merge_deep

_MODALITIES = ("text", "audio", "image", "video", "pdf")
# provider.<id>.options keys that configure the connection, not the model call.
CONNECTION_KEYS = frozenset(
    {"apiKey", "baseURL", "headers", "timeout", "headerTimeout", "chunkTimeout", "enterpriseUrl", "fetch"}
)


def _headers(where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"opencode.json: {where} must be an object of strings, got {value!r}")
    return value


def provider_options(provider_id: str, raw: Any) -> dict[str, Any]:
    """``provider.<id>.options`` without its connection keys; a malformed value raises ``ConfigError``."""
    where = f"provider.{provider_id}.options"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"opencode.json: {where} must be an object, got {raw!r}")
    _headers(f"{where}.headers", raw.get("headers"))
    return {k: v for k, v in raw.items() if k not in CONNECTION_KEYS}


class _Fields:
    """Typed reads of one opencode.json model entry, each error naming the offending key."""

    def __init__(self, provider_id: str, model_id: str, spec: Any) -> None:
        self.where = f"provider.{provider_id}.models.{model_id}"
        if not isinstance(spec, dict):
            raise ConfigError(f"opencode.json: {self.where} must be an object, got {spec!r}")
        self.spec = spec

    def _fail(self, path: str, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"opencode.json: {self.where}.{path} must be {expected}, got {value!r}")

    def section(self, key: str) -> dict[str, Any]:
        value = self.spec.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._fail(key, "an object", value)
        return value

    def number(self, section: dict[str, Any], path: str, key: str) -> float | None:
        value = section.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self._fail(f"{path}.{key}" if path else key, "a non-negative number", value)
        return float(value)

    def flag(self, key: str) -> bool | None:
        value = self.spec.get(key)
        if value is not None and not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def text(self, key: str) -> str | None:
        value = self.spec.get(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def headers(self) -> dict[str, str]:
        return _headers(f"{self.where}.headers", self.spec.get("headers"))

    def variants(self) -> dict[str, dict[str, Any]]:
        variants = self.section("variants")
        for name, spec in variants.items():
            if not isinstance(spec, dict):
                raise self._fail(f"variants.{name}", "an object", spec)
            if not isinstance(spec.get("disabled", False), bool):
                raise self._fail(f"variants.{name}.disabled", "true or false", spec["disabled"])
        return variants

    def modalities(self, key: str) -> list[str] | None:
        value = self.section("modalities").get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(m in _MODALITIES for m in value):
            raise self._fail(f"modalities.{key}", f"a list of {', '.join(_MODALITIES)}", value)
        return value


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _prices(fields: _Fields | None, override: dict[str, Any], path: str, base: dict[str, Any]) -> Prices:
    def pick(key: str) -> float:
        mine = fields.number(override, path, key) if fields else None
        return float(_first(mine, base.get(key), 0))

    return Prices(pick("input"), pick("output"), pick("cache_read"), pick("cache_write"))


def model_info(
    provider_id: str, model_id: str, spec: Any = None, *, npm: str | None = None, options: Any = None
) -> ModelInfo:
    """``provider_id/model_id`` as the catalog describes it, refined by its opencode.json entry
    ``spec`` (``None`` when the model is not configured); ``npm`` is the provider's API package and
    ``options`` its ``provider.<id>.options``. As in OpenCode, a model the catalog does not know
    has neither the temperature nor the reasoning capability unless its entry says so."""
    fields = _Fields(provider_id, model_id, spec) if spec is not None else None
    api_id = (fields.text("id") if fields else None) or model_id
    known = catalog.model(provider_id, api_id) or {}
    limit = fields.section("limit") if fields else {}
    cost = fields.section("cost") if fields else {}
    known_cost = known.get("cost") or {}
    known_limit = known.get("limit") or {}

    over = cost.get("context_over_200k")
    if over is not None and not isinstance(over, dict):
        raise ConfigError(f"opencode.json: {(fields.where if fields else '')}.cost.context_over_200k must be an object")
    long_context: Prices | None = None
    if over is not None or known_cost.get("context_over_200k"):
        long_context = _prices(fields, over or {}, "cost.context_over_200k", known_cost.get("context_over_200k") or {})
    prices = _prices(fields, cost, "cost", known_cost)

    def flag(key: str, default: bool) -> bool:
        return bool(_first(fields.flag(key) if fields else None, known.get(key), default))

    def text(key: str, default: str) -> str:
        return str(_first(fields.text(key) if fields else None, known.get(key), default))

    context = _first(fields.number(limit, "limit", "context") if fields else None, known_limit.get("context"), 128_000)
    output = _first(fields.number(limit, "limit", "output") if fields else None, known_limit.get("output"))
    name = (fields.text("name") if fields else None) or (model_id if api_id != model_id else None)
    known_modalities = known.get("modalities") or {}
    info = ModelInfo(
        provider_id=provider_id,
        model_id=api_id,
        name=name or known.get("name") or model_id,
        context_limit=int(context),
        output_limit=int(output if output is not None else 4_096),
        output_known=output is not None,
        cost_input=prices.input,
        cost_output=prices.output,
        cost_cache_read=prices.cache_read,
        cost_cache_write=prices.cache_write,
        cost_over_200k=long_context,
        family=text("family", ""),
        release_date=text("release_date", ""),
        status=text("status", "active"),
        temperature=flag("temperature", False),
        reasoning=flag("reasoning", False),
        attachment=flag("attachment", False),
        toolcall=flag("tool_call", True),
        modalities_input=tuple(
            _first(fields.modalities("input") if fields else None, known_modalities.get("input"), ["text"])
        ),
        modalities_output=tuple(
            _first(fields.modalities("output") if fields else None, known_modalities.get("output"), ["text"])
        ),
        npm=npm or COMPATIBLE_PACKAGE,
        options=merge_deep(known.get("options") or {}, fields.section("options") if fields else {}),
        headers={**(known.get("headers") or {}), **(fields.headers() if fields else {})},
        provider_options=provider_options(provider_id, options),
    )
    return replace(info, variants=configured_variants(generated_variants(info), fields.variants() if fields else {}))


def model_entry(info: ModelInfo, url: str | None, npm: str | None, model_id: str | None = None) -> dict[str, Any]:
    """A model as ``GET /config/providers`` and ``GET /provider`` describe it (OpenCode's ``Model``)."""

    def modalities(kinds: tuple[str, ...]) -> dict[str, bool]:
        return {m: m in kinds for m in _MODALITIES}

    def cost(prices: Prices) -> dict[str, Any]:
        return {
            "input": prices.input,
            "output": prices.output,
            "cache": {"read": prices.cache_read, "write": prices.cache_write},
        }

    wire_cost = cost(info.prices)
    if info.cost_over_200k is not None:
        wire_cost["experimentalOver200K"] = cost(info.cost_over_200k)
    return {
        "id": model_id or info.model_id,
        "providerID": info.provider_id,
        "api": {"id": info.model_id, "url": url or "", "npm": npm or info.npm},
        "name": info.name,
        "family": info.family,
        "capabilities": {
            "temperature": info.temperature,
            "reasoning": info.reasoning,
            "attachment": info.attachment,
            "toolcall": info.toolcall,
            "input": modalities(info.modalities_input),
            "output": modalities(info.modalities_output),
            "interleaved": False,
        },
        "cost": wire_cost,
        "limit": {"context": info.context_limit, "output": info.output_limit},
        "status": info.status if info.status in ("alpha", "beta", "deprecated", "active") else "active",
        "options": dict(info.options),
        "headers": dict(info.headers),
        "release_date": info.release_date or "2026-01-01",
        "variants": {name: dict(spec) for name, spec in info.variants.items()},
    }


LONG_CONTEXT = 200_000


def step_cost(model: ModelInfo, usage: Any) -> float:
    """A step's cost in USD, as OpenCode's ``getUsage`` computes it: ``usage.input`` excludes
    cached tokens; input, output, cache reads and cache writes at their prices, reasoning at the
    output price; the ``context_over_200k`` prices apply to the whole step when its input plus
    cache reads exceed 200k tokens."""
    prices = model.prices
    if model.cost_over_200k is not None and usage.input + usage.cache_read > LONG_CONTEXT:
        prices = model.cost_over_200k
    total: float = (
        usage.input * prices.input
        + (usage.output + usage.reasoning) * prices.output
        + usage.cache_read * prices.cache_read
        + usage.cache_write * prices.cache_write
    )
    return total / 1_000_000
