"""Worktree names as OpenCode makes them: a client's name slugified, else a random
adjective-noun pair; a taken one gets a random pair appended."""

from __future__ import annotations

import random
import re

ATTEMPTS = 26  # names tried before giving up (OpenCode's count)

_ADJECTIVES = (
    "brave", "calm", "clever", "cosmic", "crisp", "curious", "eager", "gentle", "glowing", "happy",
    "hidden", "jolly", "kind", "lucky", "mighty", "misty", "neon", "nimble", "playful", "proud",
    "quick", "quiet", "shiny", "silent", "stellar", "sunny", "swift", "tidy", "witty",
)  # fmt: skip
_NOUNS = (
    "cabin", "cactus", "canyon", "circuit", "comet", "eagle", "engine", "falcon", "forest", "garden",
    "harbor", "island", "knight", "lagoon", "meadow", "moon", "mountain", "nebula", "orchid", "otter",
    "panda", "pixel", "planet", "river", "rocket", "sailor", "squid", "star", "tiger", "wizard", "wolf",
)  # fmt: skip


def slug(name: str) -> str:
    """Lower case, every run of other characters than ``a-z0-9`` one ``-``, none at the ends."""
    return re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")


def random_name() -> str:
    return f"{random.choice(_ADJECTIVES)}-{random.choice(_NOUNS)}"


def candidates(base: str) -> list[str]:
    """The names to try in turn: ``base`` then ``base-<random>``, or random names without one."""
    if not base:
        return [random_name() for _ in range(ATTEMPTS)]
    return [base] + [f"{base}-{random_name()}" for _ in range(ATTEMPTS - 1)]
