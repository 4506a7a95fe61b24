"""Small request helpers shared by the tests."""

from __future__ import annotations

from typing import Any

import httpx


def create_session(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/session", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def text_prompt(text: str, **extra: Any) -> dict[str, Any]:
    return {"parts": [{"type": "text", "text": text}], **extra}


def assistant_text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")
