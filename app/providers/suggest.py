"""The "Did you mean" of an unknown model, computed as OpenCode does (``Provider.getModel``):
ids holding the query's characters in order, best fuzzy match first (at most three); for a model
id with no such match, the ids sharing the most of its words (``gpt-5-mini`` -> ``gpt``,
``mini``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

LIMIT = 3


def _in_order(query: str, target: str) -> bool:
    """Every character of ``query`` appears in ``target`` in the same order (case-insensitive)."""
    rest = iter(target.lower())
    return all(char in rest for char in query.lower())


def fuzzy(query: str, candidates: Iterable[str]) -> list[str]:
    """Up to three ``candidates`` matching ``query`` as a subsequence, best first: the closest
    contiguous match, then the shortest id (as OpenCode ranks ``gpt-4o`` before ``gpt-4o-mini``)."""
    matching = [c for c in dict.fromkeys(candidates) if _in_order(query, c)]
    if not matching:
        return []
    from rapidfuzz import fuzz  # on first use: start-up time is tracked

    wanted = query.lower()
    scores = {c: fuzz.partial_ratio(wanted, c.lower()) for c in matching}
    return sorted(matching, key=lambda c: (-scores[c], len(c), c))[:LIMIT]


def model_suggestions(model_id: str, available: Iterable[str]) -> list[str]:
    """Suggestions among a provider's model ids: fuzzy matches, else the ids sharing most words."""
    ids = list(dict.fromkeys(available))
    found = fuzzy(model_id, ids)
    if found:
        return found
    words = [w for w in re.split(r"[^a-z0-9]+", model_id.lower()) if len(w) > 1]
    scored = [(sum(w in i.lower() for w in words), i) for i in ids]
    ranked = sorted(((-score, i) for score, i in scored if score > 0))
    return [i for _score, i in ranked[:LIMIT]]
