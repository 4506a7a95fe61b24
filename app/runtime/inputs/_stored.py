"""The prompt admission stores with an input (the ``inputs.prompt`` column, as JSON): everything
a drain on any process needs to answer it, decided once at admission (agent, model, variant), so
a later change of the session's defaults never changes what an admitted prompt asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.jsonutil import dumps, loads
from app.providers.registry import ModelRef


@dataclass(frozen=True, slots=True)
class StoredPrompt:
    request: dict[str, Any]  # the request as compared on a retry with the same id (``canonical``)
    agent: str
    model: dict[str, str]  # providerID, modelID and, when one was chosen, variant
    prompt: dict[str, Any]  # as the V2 protocol shows it: {text, files?, agents?}
    parts: list[dict[str, Any]]  # the user message's parts
    system: str | None = None
    tools: dict[str, bool] | None = None
    deferred: bool = False  # a V2 prompt: its user message is written when the drain takes it
    compaction: str | None = None  # "manual" or "auto": a request to summarize the history

    @property
    def model_ref(self) -> ModelRef:
        return ModelRef(self.model["providerID"], self.model["modelID"])

    @property
    def variant(self) -> str | None:
        return self.model.get("variant")

    def to_json(self) -> str:
        return dumps(
            {
                "request": self.request,
                "agent": self.agent,
                "system": self.system,
                "tools": self.tools,
                "model": self.model,
                "prompt": self.prompt,
                "parts": self.parts,
                "deferred": self.deferred,
                "compaction": self.compaction,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> StoredPrompt:
        """Read a stored prompt (keys added after the first release are optional)."""
        data = loads(text)
        return cls(
            request=data["request"],
            agent=data["agent"],
            model=data["model"],
            prompt=data["prompt"],
            parts=data["parts"],
            system=data.get("system"),
            tools=data.get("tools"),
            deferred=bool(data.get("deferred")),
            compaction=data.get("compaction"),
        )
