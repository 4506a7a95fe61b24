"""The provider options OpenCode sets by itself, beneath the ones configured in opencode.json
(``ProviderTransform.options`` for a turn, ``smallOptions`` for small calls such as titles).
Only the rules for the APIs this server calls natively are here (OpenAI's gpt-5 family)."""

from __future__ import annotations

from typing import Any

from app.providers.base import ModelInfo


def turn_options(model: ModelInfo) -> dict[str, Any]:
    """A turn's defaults: the gpt-5 family (not its chat models) reasons at medium effort with
    automatic summaries (not gpt-5-pro), and gpt-5.x answers tersely (not codex or chat)."""
    api_id = model.model_id
    options: dict[str, Any] = {}
    if "gpt-5" in api_id and "gpt-5-chat" not in api_id:
        if "gpt-5-pro" not in api_id:
            options.update(reasoningEffort="medium", reasoningSummary="auto")
        if "gpt-5." in api_id and "codex" not in api_id and "-chat" not in api_id:
            options["textVerbosity"] = "low"
    return options


def small_options(model: ModelInfo) -> dict[str, Any]:
    """A small call's options: OpenAI models (and any gpt-5) reason as little as they can, so a
    title is not spent on reasoning (gpt-5.x has no ``minimal`` effort: ``low``)."""
    if model.provider_id == "openai" or "gpt-5" in model.model_id:
        return {"reasoningEffort": "low" if "5." in model.model_id else "minimal"}
    return {}
