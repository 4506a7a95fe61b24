"""The committed OpenAPI document matches the code, and ``GET /doc`` serves it."""

from __future__ import annotations

import json

import httpx

from app.openapi import DOCUMENT, render


def test_committed_document_is_current() -> None:
    assert DOCUMENT.exists(), "run: python -m app.openapi"
    assert DOCUMENT.read_text() == render(), "openapi/openapi.json is stale; run: python -m app.openapi"


def test_doc_route_serves_the_document(client: httpx.Client) -> None:
    served = client.get("/doc").json()
    assert served == json.loads(DOCUMENT.read_text())
    operations = {op["operationId"] for path in served["paths"].values() for op in path.values()}
    assert {
        "session.list",
        "session.create",
        "session.prompt_async",
        "session.messages",
        "event.subscribe",
        "global.event",
    } <= operations
