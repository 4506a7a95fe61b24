"""The HTML of a shared session's page, rendered on the server.

Markdown goes through markdown-it-py (CommonMark, raw HTML off, so a transcript can never inject
markup) and code blocks through Pygments; tool calls and reasoning are folded into ``<details>``.
The page needs nothing from the internet: its style and its few lines of script are inline. The
script listens to the share's own event stream and swaps in a freshly rendered transcript when
the session changes, so rendering lives in one place (here) rather than in Python and JavaScript.

Imported on the first share request only: markdown-it-py and Pygments cost start-up time.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from html import escape
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from app.jsonutil import dumps
from app.wire import MessageWithParts, Session

_CODE_STYLE = "friendly"


def _highlight(code: str, language: str, _attrs: Any) -> str:
    """Pygments spans for a fenced block in a known language; "" lets markdown-it escape it."""
    try:
        lexer = get_lexer_by_name(language) if language else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return ""
    return highlight(code, lexer, HtmlFormatter(nowrap=True))


@cache
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable("table")


def markdown(text: str) -> str:
    html: str = _markdown().render(text)
    return html


def _tool(part: Mapping[str, Any]) -> str:
    state = part.get("state") or {}
    status = str(state.get("status", "pending"))
    title = state.get("title") or ""
    label = f"{part.get('tool', 'tool')}" + (f" · {title}" if title else "")
    body = [f'<div class="label">Input</div><pre>{escape(dumps(state.get("input") or {}))}</pre>']
    if status == "completed":
        body.append(f'<div class="label">Output</div><pre>{escape(str(state.get("output", "")))}</pre>')
    elif status == "error":
        body.append(f'<div class="label">Error</div><pre class="error">{escape(str(state.get("error", "")))}</pre>')
    return (
        f'<details class="tool {escape(status)}"><summary><span class="status">{escape(status)}</span> '
        f"{escape(label)}</summary>{''.join(body)}</details>"
    )


def _part(part: Mapping[str, Any]) -> str:
    kind = part.get("type")
    if kind == "text" and not part.get("synthetic") and not part.get("ignored"):
        return f'<div class="text">{markdown(str(part.get("text", "")))}</div>'
    if kind == "reasoning" and part.get("text"):
        return f'<details class="reasoning"><summary>Thinking</summary>{markdown(str(part["text"]))}</details>'
    if kind == "tool":
        return _tool(part)
    if kind == "file":
        return f'<div class="file">📎 {escape(str(part.get("filename") or part.get("url", "")))}</div>'
    if kind == "patch" and part.get("files"):
        files = "".join(f"<li>{escape(str(f))}</li>" for f in part["files"])
        return f'<div class="patch"><div class="label">Files changed</div><ul>{files}</ul></div>'
    return ""


def _message(message: MessageWithParts) -> str:
    info = message["info"]
    role = str(info.get("role", ""))
    parts = "".join(_part(p) for p in message["parts"])
    error = info["error"] if info["role"] == "assistant" and "error" in info else None
    if error:
        detail = (error.get("data") or {}).get("message") or error.get("name", "error")
        parts += f'<div class="error">{escape(str(detail))}</div>'
    if not parts:
        return ""
    model = f' <span class="model">{escape(str(info.get("modelID", "")))}</span>' if role == "assistant" else ""
    return (
        f'<article class="msg {escape(role)}" id="{escape(str(info["id"]))}">'
        f'<div class="role">{escape(role)}{model}</div>{parts}</article>'
    )


def transcript(messages: list[MessageWithParts]) -> str:
    """The messages as HTML (the part of the page that live updates replace)."""
    return "".join(_message(m) for m in messages)


@cache
def _style() -> str:
    code: str = HtmlFormatter(style=_CODE_STYLE).get_style_defs("pre code")
    return (
        "body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}"
        ".msg{border-left:3px solid #ccc;padding:.25rem .75rem;margin:1rem 0}"
        ".user{border-color:#3b82f6}.assistant{border-color:#10b981}"
        ".role{font-size:.8rem;color:#666;text-transform:uppercase}.model{text-transform:none}"
        "pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;white-space:pre-wrap}"
        "details{margin:.5rem 0;border:1px solid #e5e7eb;border-radius:4px;padding:.25rem .5rem}"
        "summary{cursor:pointer}.reasoning{color:#666}.label{font-size:.75rem;color:#666}"
        ".error{color:#b91c1c}.status{font-size:.75rem;color:#666}#status{font-size:.8rem;color:#666}" + code
    )


_SCRIPT = """
(() => {
  const base = location.pathname.replace(/\\/$/, "");
  const box = document.getElementById("transcript");
  const status = document.getElementById("status");
  let pending = null;
  const refresh = async () => {
    pending = null;
    const response = await fetch(base + "/transcript", {cache: "no-store"});
    if (response.status === 404) {
      status.textContent = "This share was revoked.";
      box.innerHTML = "";
      events.close();
      return;
    }
    if (response.ok) box.innerHTML = await response.text();
  };
  const events = new EventSource(base + "/event");
  events.onmessage = (message) => {
    const type = JSON.parse(message.data).type || "";
    if (type.startsWith("server.")) return;
    if (pending === null) pending = setTimeout(refresh, 100);
  };
  events.onopen = () => { status.textContent = "Live"; refresh(); };
  events.onerror = () => { status.textContent = "Reconnecting…"; };
})();
"""


def page(session: Session, messages: list[MessageWithParts]) -> str:
    title = escape(str(session.get("title", "")))
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="robots" content="noindex"><style>{_style()}</style></head>'
        f'<body><h1>{title}</h1><div id="status"></div><main id="transcript">{transcript(messages)}</main>'
        f"<script>{_SCRIPT}</script></body></html>"
    )
