"""What a model call is tuned with, computed as OpenCode's ``ProviderTransform`` and
``session/llm.ts`` compute it, so a model configured for OpenCode behaves the same here:

- the variants a model offers: those OpenCode generates for its API package and capabilities
  (reasoning-effort levels, thinking budgets), merged with opencode.json's ``variants``;
- the provider options of one call: OpenCode's defaults for the model, then the model's
  ``options``, then the agent's, then the chosen variant's (merged deeply, later wins);
- temperature and top_p: the agent's, else OpenCode's default for the model family;
- the output-token limit: the model's, at most 32k, less the thinking budget where Anthropic
  counts thinking inside ``max_tokens``.

Options keep OpenCode's camelCase keys; each provider translates the ones it knows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.providers.base import ModelInfo

OUTPUT_TOKEN_MAX = 32_000
ANTHROPIC_PACKAGE = "@ai-sdk/anthropic"
OPENAI_PACKAGE = "@ai-sdk/openai"
COMPATIBLE_PACKAGE = "@ai-sdk/openai-compatible"
GOOGLE_PACKAGE = "@ai-sdk/google"

_WIDE_EFFORTS = ("low", "medium", "high")
_OPENAI_EFFORTS = ("none", "minimal", *_WIDE_EFFORTS, "xhigh")
# Packages whose reasoning models take ``reasoningEffort`` low/medium/high.
_EFFORT_PACKAGES = {
    COMPATIBLE_PACKAGE,
    "@ai-sdk/cerebras",
    "@ai-sdk/togetherai",
    "@ai-sdk/xai",
    "@ai-sdk/deepinfra",
}


def merge_deep(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, objects merged key by key (remeda's ``mergeDeep``)."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        merged[key] = merge_deep(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping) else value
    return merged


def _thinking(budget: int) -> dict[str, Any]:
    return {"thinking": {"type": "enabled", "budgetTokens": budget}}


def _openai_efforts(model_id: str, released: str) -> list[str]:
    if "codex" in model_id:
        return [*_WIDE_EFFORTS, "xhigh"] if "5.2" in model_id else list(_WIDE_EFFORTS)
    efforts = list(_WIDE_EFFORTS)
    if "gpt-5-" in model_id or model_id == "gpt-5":
        efforts.insert(0, "minimal")
    if released >= "2025-11-13":
        efforts.insert(0, "none")
    if released >= "2025-12-04":
        efforts.append("xhigh")
    return efforts


def generated_variants(model: ModelInfo) -> dict[str, dict[str, Any]]:
    """The variants OpenCode offers for a reasoning model without any configuration."""
    model_id = model.model_id.lower()
    if not model.reasoning or any(name in model_id for name in ("deepseek", "minimax", "glm", "mistral")):
        return {}
    npm = model.npm
    if npm == "@openrouter/ai-sdk-provider":
        if not any(name in model_id for name in ("gpt", "gemini-3", "grok-4")):
            return {}
        return {e: {"reasoning": {"effort": e}} for e in _OPENAI_EFFORTS}
    if npm == "@ai-sdk/gateway":
        return {e: {"reasoningEffort": e} for e in _OPENAI_EFFORTS}
    if npm in _EFFORT_PACKAGES:
        return {e: {"reasoningEffort": e} for e in _WIDE_EFFORTS}
    if npm in (OPENAI_PACKAGE, "@ai-sdk/azure"):
        if model_id in ("gpt-5-pro", "o1-mini"):
            return {}
        if npm == OPENAI_PACKAGE:
            efforts = _openai_efforts(model_id, model.release_date)
        else:
            efforts = (["minimal"] if "gpt-5-" in model_id or model_id == "gpt-5" else []) + list(_WIDE_EFFORTS)
        summary = {"reasoningSummary": "auto", "include": ["reasoning.encrypted_content"]}
        return {e: {"reasoningEffort": e, **summary} for e in efforts}
    if npm == ANTHROPIC_PACKAGE:
        return {"high": _thinking(16_000), "max": _thinking(31_999)}
    if npm == "@ai-sdk/amazon-bedrock":
        if "anthropic" in model_id:
            return {
                name: {"reasoningConfig": {"type": "enabled", "budgetTokens": budget}}
                for name, budget in (("high", 16_000), ("max", 31_999))
            }
        return {e: {"reasoningConfig": {"type": "enabled", "maxReasoningEffort": e}} for e in _WIDE_EFFORTS}
    if npm in (GOOGLE_PACKAGE, "@ai-sdk/google-vertex"):
        if "2.5" in model_id:
            return {
                name: {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": budget}}
                for name, budget in (("high", 16_000), ("max", 24_576))
            }
        return {e: {"includeThoughts": True, "thinkingLevel": e} for e in ("low", "high")}
    return {}


def configured_variants(
    generated: Mapping[str, Mapping[str, Any]], configured: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """opencode.json's ``variants`` merged over the generated ones; ``disabled: true`` removes one."""
    merged = merge_deep(generated, configured)
    return {
        name: {k: v for k, v in spec.items() if k != "disabled"}
        for name, spec in merged.items()
        if not spec.get("disabled")
    }


def base_options(model: ModelInfo, session_id: str | None) -> dict[str, Any]:
    """OpenCode's per-model defaults (``ProviderTransform.options``)."""
    api_id = model.model_id
    result: dict[str, Any] = {}
    if model.provider_id == "openai" or model.npm == OPENAI_PACKAGE:
        result["store"] = False
    if model.npm == "@openrouter/ai-sdk-provider":
        result["usage"] = {"include": True}
        if "gemini-3" in api_id:
            result["reasoning"] = {"effort": "high"}
    if model.provider_id == "baseten":
        result["chat_template_args"] = {"enable_thinking": True}
    if model.provider_id in ("zai", "zhipuai") and model.npm == COMPATIBLE_PACKAGE:
        result["thinking"] = {"type": "enabled", "clear_thinking": False}
    if session_id and (model.provider_id == "openai" or model.provider_options.get("setCacheKey") is True):
        result["promptCacheKey"] = session_id
    if model.npm in (GOOGLE_PACKAGE, "@ai-sdk/google-vertex"):
        result["thinkingConfig"] = {"includeThoughts": True} | (
            {"thinkingLevel": "high"} if "gemini-3" in api_id else {}
        )
    if "gpt-5" in api_id and "gpt-5-chat" not in api_id:
        native = model.provider_id == "openai" or model.npm == OPENAI_PACKAGE
        if "gpt-5-pro" not in api_id:
            result["reasoningEffort"] = "medium"
            if native:
                result["reasoningSummary"] = "auto"
                result["include"] = ["reasoning.encrypted_content"]
        if native and "gpt-5." in api_id and "codex" not in api_id and "-chat" not in api_id:
            result["textVerbosity"] = "low"
    return result


def default_temperature(model: ModelInfo) -> float | None:
    """OpenCode's temperature for model families that need one (none for the rest)."""
    model_id = model.model_id.lower()
    if "qwen" in model_id:
        return 0.55
    if any(name in model_id for name in ("gemini", "glm-4.6", "glm-4.7", "minimax-m2")):
        return 1.0
    if "kimi-k2" in model_id:
        return 1.0 if "thinking" in model_id else 0.6
    return None


def default_top_p(model: ModelInfo) -> float | None:
    model_id = model.model_id.lower()
    if "qwen" in model_id:
        return 1.0
    if "minimax-m2" in model_id or "gemini" in model_id:
        return 0.95
    return None


def thinking_budget(options: Mapping[str, Any]) -> int:
    """The Anthropic thinking budget ``options`` enable (0 when thinking is off)."""
    thinking = options.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled":
        return 0
    budget = thinking.get("budgetTokens")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0 else 0


def max_output_tokens(model: ModelInfo, options: Mapping[str, Any]) -> int:
    """Text tokens a call may produce: the model's limit (32k when unknown, as OpenCode asks),
    at most 32k. With Anthropic thinking the budget is added on top in the request, so text plus
    thinking must fit the model's cap."""
    cap = (model.output_limit if model.output_known else 0) or OUTPUT_TOKEN_MAX
    standard = min(cap, OUTPUT_TOKEN_MAX)
    budget = thinking_budget(options) if model.npm == ANTHROPIC_PACKAGE else 0
    if budget and budget + standard > cap:
        return max(cap - budget, 1)
    return standard


@dataclass(frozen=True, slots=True)
class AgentTuning:
    """An agent's model settings from opencode.json (``agent.<name>``), already validated."""

    options: Mapping[str, Any] = field(default_factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    variant: str | None = None


@dataclass(frozen=True, slots=True)
class CallTuning:
    """What one model call is sent with, besides its messages and tools."""

    options: dict[str, Any]
    temperature: float | None
    top_p: float | None
    max_tokens: int
    headers: dict[str, str]

    def request_fields(self) -> dict[str, Any]:
        """As ``ChatRequest`` keyword arguments (the field names are the same)."""
        return {
            "options": self.options,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "headers": self.headers,
        }


def tune(model: ModelInfo, agent: AgentTuning, variant: str | None, session_id: str | None) -> CallTuning:
    """One call's settings, merged in ``session/llm.ts``'s order: defaults, the model's options,
    the agent's, the variant's (an unknown variant adds nothing, as in OpenCode)."""
    options = merge_deep(base_options(model, session_id), model.options)
    options = merge_deep(options, agent.options)
    options = merge_deep(options, model.variants.get(variant or "", {}))
    temperature = None
    if model.temperature:  # a model without the temperature capability is sent none
        temperature = agent.temperature if agent.temperature is not None else default_temperature(model)
    top_p = agent.top_p if agent.top_p is not None else default_top_p(model)
    return CallTuning(options, temperature, top_p, max_output_tokens(model, options), dict(model.headers))


def small_options(model: ModelInfo) -> dict[str, Any]:
    """A small call's options (titles): OpenAI models reason as little as they can, so a title is
    not spent on reasoning (gpt-5.x has no ``minimal`` effort: ``low``)."""
    if model.provider_id == "openai" or "gpt-5" in model.model_id:
        return {"reasoningEffort": "low" if "5." in model.model_id else "minimal"}
    return {}
