"""The read-only pages of shared sessions: ``/share/:token`` (HTML) and ``/share/:token/data``
(JSON). Only a valid, unrevoked token reaches a transcript; everything is escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, Response
from starlette.responses import HTMLResponse

from app.api.deps import RuntimeDep
from app.api.responses import JSONBody

router = APIRouter(tags=["share"])

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}"
    ".msg{border-left:3px solid #ccc;padding:.25rem .75rem;margin:1rem 0;white-space:pre-wrap}"
    ".user{border-color:#3b82f6}.assistant{border-color:#10b981}.role{font-size:.8rem;color:#666}"
    ".reasoning{color:#777;font-style:italic}"
)


def _render(session: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    blocks = []
    for message in messages:
        role = message["info"]["role"]
        texts = [
            f'<div class="{escape(p["type"])}">{escape(p.get("text", ""))}</div>'
            for p in message["parts"]
            if p["type"] in ("text", "reasoning")
        ]
        blocks.append(f'<div class="msg {escape(role)}"><div class="role">{escape(role)}</div>{"".join(texts)}</div>')
    title = escape(session["title"])
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="robots" content="noindex"><style>{_STYLE}</style></head>'
        f"<body><h1>{title}</h1>{''.join(blocks)}</body></html>"
    )


@router.get(
    "/share/{token}",
    operation_id="share.page",
    response_class=HTMLResponse,
    summary="Read-only page of a shared session",
)
async def page(runtime: RuntimeDep, token: str) -> Response:
    session, messages = await runtime.shares.shared(token)
    return HTMLResponse(_render(session, messages))


@router.get("/share/{token}/data", operation_id="share.data", summary="A shared session and its messages")
async def data(runtime: RuntimeDep, token: str) -> Response:
    session, messages = await runtime.shares.shared(token)
    return JSONBody({"session": session, "messages": messages})
