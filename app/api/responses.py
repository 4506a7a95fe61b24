"""JSON responses encoded with orjson. Routes return ``JSONBody`` directly (rather than
letting FastAPI validate a response model) because the runtime already produces wire-shaped
dicts; response models are still declared on routes for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from app.jsonutil import dumpb


class JSONBody(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumpb(content)
