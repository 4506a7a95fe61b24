"""The agents a prompt can name, as OpenCode defines them, plus those a project declares in
opencode.json (``agent.<name>``: description, mode, model, prompt, permission, tools, disable, and
the model settings options, temperature, top_p and variant; as in OpenCode, keys it does not know
are options too).
An agent is a mode (primary agents are chosen by the user, subagents run through ``task``), an
optional model and system prompt, and permission rules that come before the project's and the
session's. ``plan`` may read and run but not edit."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from app.config import ConfigError, ConfigLoader, OpenCodeConfig
from app.providers.options import AgentTuning

Rule = dict[str, str]

# Every agent's rules start so, as OpenCode 1.18's do: the ``question`` tool (and plan mode's
# ``plan_enter``/``plan_exit``) only for the agents that allow them again below, so a subagent
# or an agent the project declares is not offered ``question`` unless its permission says so.
BASE_RULES: list[Rule] = [
    {"permission": "*", "pattern": "*", "action": "allow"},
    {"permission": "doom_loop", "pattern": "*", "action": "ask"},
    {"permission": "external_directory", "pattern": "*", "action": "ask"},
    {"permission": "question", "pattern": "*", "action": "deny"},
    {"permission": "plan_enter", "pattern": "*", "action": "deny"},
    {"permission": "plan_exit", "pattern": "*", "action": "deny"},
    {"permission": "read", "pattern": "*.env", "action": "ask"},
    {"permission": "read", "pattern": "*.env.*", "action": "ask"},
    {"permission": "read", "pattern": "*.env.example", "action": "allow"},
]

BUILT_IN: dict[str, dict[str, Any]] = {
    "build": {
        "description": "The default agent. Executes tools based on configured permissions.",
        "mode": "primary",
        "rules": [
            *BASE_RULES,
            {"permission": "question", "pattern": "*", "action": "allow"},
            {"permission": "plan_enter", "pattern": "*", "action": "allow"},
        ],
    },
    "plan": {
        "description": "Plan mode. Disallows all edit tools.",
        "mode": "primary",
        "rules": [
            *BASE_RULES,
            {"permission": "question", "pattern": "*", "action": "allow"},
            {"permission": "plan_exit", "pattern": "*", "action": "allow"},
            {"permission": "edit", "pattern": "*", "action": "deny"},
            {"permission": "edit", "pattern": ".opencode/plans/*.md", "action": "allow"},
            {"permission": "task", "pattern": "general", "action": "deny"},
        ],
    },
    "general": {
        "description": "General-purpose agent for researching complex questions and executing multi-step tasks.",
        "mode": "subagent",
        "rules": [*BASE_RULES, {"permission": "todowrite", "pattern": "*", "action": "deny"}],
    },
}


@dataclass(frozen=True, slots=True)
class Agent:
    name: str
    description: str
    mode: str
    rules: list[Rule]
    prompt: str | None = None
    model: str | None = None  # "provider/model"
    # Its model settings, or why they cannot be used (raised by ``tuning`` when a turn needs them).
    settings: AgentTuning | ConfigError = field(default_factory=AgentTuning)

    def tuning(self) -> AgentTuning:
        """The agent's model settings; a malformed one raises ``ConfigError`` naming the key."""
        if isinstance(self.settings, ConfigError):
            raise ConfigError(str(self.settings))
        return self.settings

    def as_wire(self) -> dict[str, Any]:
        """OpenCode's Agent shape (``GET /agent``)."""
        agent: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "mode": self.mode,
            "native": self.name in BUILT_IN,
            "permission": self.rules,
            "options": {},
        }
        if isinstance(self.settings, AgentTuning):
            agent["options"] = dict(self.settings.options)
            for key, value in (
                ("temperature", self.settings.temperature),
                ("topP", self.settings.top_p),
                ("variant", self.settings.variant),
            ):
                if value is not None:
                    agent[key] = value
        if self.prompt:
            agent["prompt"] = self.prompt
        if self.model and "/" in self.model:
            provider_id, model_id = self.model.split("/", 1)
            agent["model"] = {"providerID": provider_id, "modelID": model_id}
        return agent


def config_rules(value: Any) -> list[Rule]:
    """OpenCode's ``permission`` config: ``"allow"``, ``{"bash": "ask"}`` or ``{"bash": {"git *": "allow"}}``."""
    if isinstance(value, str):
        return [{"permission": "*", "pattern": "*", "action": value}]
    rules: list[Rule] = []
    for permission, spec in (value or {}).items() if isinstance(value, dict) else ():
        if isinstance(spec, str):
            rules.append({"permission": permission, "pattern": "*", "action": spec})
        elif isinstance(spec, dict):
            rules += [
                {
                    "permission": permission,
                    "pattern": os.path.expanduser(pattern.replace("$HOME", "~")),
                    "action": action,
                }
                for pattern, action in spec.items()
            ]
    return [r for r in rules if r["action"] in ("allow", "deny", "ask")]


# agent.<name> keys OpenCode interprets; any other key is one of the agent's options.
_AGENT_KEYS = frozenset(
    {
        "name", "model", "variant", "temperature", "top_p", "prompt", "tools", "disable", "description",
        "mode", "hidden", "options", "color", "steps", "maxSteps", "permission",
    }
)  # fmt: skip


def _number(where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"opencode.json: {where} must be a number, got {value!r}")
    return float(value)


def agent_tuning(name: str, spec: dict[str, Any]) -> AgentTuning:
    """``agent.<name>``'s model settings, validated (``ConfigError`` names the key)."""
    where = f"agent.{name}"
    options = spec.get("options")
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"opencode.json: {where}.options must be an object, got {options!r}")
    variant = spec.get("variant")
    if variant is not None and not isinstance(variant, str):
        raise ConfigError(f"opencode.json: {where}.variant must be a string, got {variant!r}")
    extra = {k: v for k, v in spec.items() if k not in _AGENT_KEYS}
    return AgentTuning(
        options={**(options or {}), **extra},
        temperature=_number(f"{where}.temperature", spec.get("temperature")),
        top_p=_number(f"{where}.top_p", spec.get("top_p")),
        variant=variant,
    )


def _settings(name: str, spec: dict[str, Any]) -> AgentTuning | ConfigError:
    try:
        return agent_tuning(name, spec)
    except ConfigError as exc:
        return exc


def tools_rules(tools: dict[str, bool]) -> list[Rule]:
    """A ``tools: {name: bool}`` map (deprecated on prompts, still used in agent configs) as rules."""
    return [{"permission": name, "pattern": "*", "action": "allow" if on else "deny"} for name, on in tools.items()]


class Agents:
    def __init__(self, config: ConfigLoader) -> None:
        self.config = config
        # Per directory: the configuration the agents were built from, and the agents. A step
        # asks for them several times; they are rebuilt only when opencode.json changed.
        self._built: dict[str, tuple[OpenCodeConfig, dict[str, Agent]]] = {}

    def all(self, directory: str) -> dict[str, Agent]:
        """The directory's agents by name (shared: callers must not change the mapping)."""
        loaded = self.config.load(directory)
        built = self._built.get(directory)
        if built is not None and built[0] is loaded:
            return built[1]
        agents = self._build(loaded)
        self._built[directory] = (loaded, agents)
        return agents

    @staticmethod
    def _build(loaded: OpenCodeConfig) -> dict[str, Agent]:
        declared = loaded.agents
        names = list(BUILT_IN) + [n for n in declared if n not in BUILT_IN]
        agents = {}
        for name in names:
            spec = declared.get(name, {})
            if spec.get("disable"):
                continue
            base = BUILT_IN.get(name, {"description": "", "mode": "all", "rules": BASE_RULES})
            listed = spec.get("tools")
            tools: dict[str, bool] = listed if isinstance(listed, dict) else {}
            mode = spec.get("mode")
            agents[name] = Agent(
                name=name,
                description=str(spec.get("description") or base["description"]),
                mode=mode if isinstance(mode, str) and mode in ("primary", "subagent", "all") else base["mode"],
                rules=[*base["rules"], *config_rules(spec.get("permission")), *tools_rules(tools)],
                prompt=spec.get("prompt") if isinstance(spec.get("prompt"), str) else None,
                model=spec.get("model") if isinstance(spec.get("model"), str) else None,
                settings=_settings(name, spec),
            )
        return agents

    def get(self, directory: str, name: str | None) -> Agent:
        """An agent by name; an unknown name gets the build agent's behaviour under its own name."""
        agents = self.all(directory)
        found = agents.get(name or "build")
        if found is None:
            build = agents.get("build") or Agent("build", "", "primary", BASE_RULES)
            found = Agent(name or "build", build.description, build.mode, build.rules, build.prompt, build.model)
        return found
