"""JSON responses encoded with orjson. Routes return ``JSONBody`` directly (rather than
letting FastAPI validate a response model) because the runtime already produces wire-shaped
dicts; response models are still declared on routes for the OpenAPI document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.responses import Response

from app.jsonutil import dumpb
from app.runtime.history import RawMessage


class JSONBody(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumpb(content)


def raw_messages_json(messages: Sequence[RawMessage]) -> bytes:
    """A message list from stored JSON, spliced rather than decoded and re-encoded."""
    body = ",".join('{"info":' + m.info + ',"parts":[' + ",".join(m.parts) + "]}" for m in messages)
    return ("[" + body + "]").encode()
