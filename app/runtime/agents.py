"""The agents a prompt can name, as OpenCode defines them: each is a mode (primary agents are
chosen by the user, subagents run through ``task``) and a set of permission rules that come
before the project's and the session's. ``plan`` may read and run but not edit."""

from __future__ import annotations

from typing import Any

Rule = dict[str, str]

BASE_RULES: list[Rule] = [
    {"permission": "*", "pattern": "*", "action": "allow"},
    {"permission": "doom_loop", "pattern": "*", "action": "ask"},
    {"permission": "external_directory", "pattern": "*", "action": "ask"},
    {"permission": "read", "pattern": "*.env", "action": "ask"},
    {"permission": "read", "pattern": "*.env.*", "action": "ask"},
    {"permission": "read", "pattern": "*.env.example", "action": "allow"},
]

AGENTS: dict[str, dict[str, Any]] = {
    "build": {
        "description": "The default agent. Executes tools based on configured permissions.",
        "mode": "primary",
        "rules": BASE_RULES,
    },
    "plan": {
        "description": "Plan mode. Disallows all edit tools.",
        "mode": "primary",
        "rules": [
            *BASE_RULES,
            {"permission": "edit", "pattern": "*", "action": "deny"},
            {"permission": "edit", "pattern": ".opencode/plans/*.md", "action": "allow"},
            {"permission": "task", "pattern": "general", "action": "deny"},
        ],
    },
    "general": {
        "description": "General-purpose agent for researching complex questions and executing multi-step tasks.",
        "mode": "subagent",
        "rules": BASE_RULES,
    },
}


def agent_rules(name: str | None) -> list[Rule]:
    """The rules of an agent; unknown names (custom agents) get the build agent's."""
    return AGENTS.get(name or "build", AGENTS["build"])["rules"]


def agent_list() -> list[dict[str, Any]]:
    """``GET /agent``: OpenCode's Agent shape."""
    return [
        {
            "name": name,
            "description": spec["description"],
            "mode": spec["mode"],
            "native": True,
            "permission": spec["rules"],
            "options": {},
        }
        for name, spec in AGENTS.items()
    ]
