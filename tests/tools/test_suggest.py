"""The "Did you mean" of an unknown model ranks candidates as OpenCode does (no server needed)."""

from __future__ import annotations

import pytest

from app.providers.suggest import fuzzy, model_suggestions


@pytest.mark.parametrize(
    ("requested", "available", "expected"),
    [  # answers of the real OpenCode 1.18 server (its catalog) to the same requests
        (
            "gpt-4o",
            ["openai/gpt-4o-2024-08-06", "openai/gpt-4o-mini", "openai/gpt-4o", "openai/gpt-4.1"],
            ["openai/gpt-4o", "openai/gpt-4o-mini", "openai/gpt-4o-2024-08-06"],
        ),
        (
            "lama",
            ["meta-llama/llama-prompt-guard-2-86m", "llama-3.3-70b-versatile", "llama-3.1-8b-instant", "qwen3"],
            ["llama-3.1-8b-instant", "llama-3.3-70b-versatile", "meta-llama/llama-prompt-guard-2-86m"],
        ),
        ("deepseek-cht", ["deepseek-v4-pro", "deepseek-flash"], ["deepseek-flash", "deepseek-v4-pro"]),
        ("chat-v9", ["deepseek-v4-pro", "deepseek-flash"], []),
    ],
)
def test_suggestions_rank_as_opencode_does(requested: str, available: list[str], expected: list[str]) -> None:
    assert model_suggestions(requested, available) == expected


def test_unknown_provider_ids_match_in_order() -> None:
    assert fuzzy("opnrouter", ["opensession", "openrouter", "openai", "anthropic"]) == ["openrouter"]
    assert fuzzy("zzz", ["openrouter"]) == []
