"""``GET /``: a page of this server's own for whoever opens its address in a browser (OpenCode
serves its web app there; a bare 404 said nothing). It lists the most recently updated sessions
of every directory and says how to connect the OpenCode app (Settings → Servers) or the TUI
(``opencode attach``) to this address.

It is a read, like any other route: behind the password when one is set (``BasicAuth``), refused
to foreign pages (``BrowserGuard``), and it starts nothing (no MCP server, watcher or git). Every
title, directory and id is escaped, and the page runs no script at all: its Content-Security-
Policy allows none, so even markup that slipped through could not act; nor may it be framed.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from app import __version__
from app.api.deps import RuntimeDep, SettingsDep
from app.clock import iso_from_ms

router = APIRouter(tags=["home"])

HOME_SESSIONS = 100  # how many of the latest sessions the page lists
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "h1 small{font-size:.9rem;color:#666;font-weight:normal}code{background:#f3f4f6;padding:.1rem .3rem;"
    "border-radius:3px}table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .5rem;"
    "border-bottom:1px solid #e5e7eb;vertical-align:top}th{font-size:.8rem;color:#666}"
    ".directory,.id{font-family:ui-monospace,monospace;font-size:.8rem;color:#555;word-break:break-all}"
    ".busy{color:#b45309;font-size:.75rem}.empty{color:#666}"
)


def _row(entry: dict[str, Any], busy: bool) -> str:
    info = entry["info"]
    updated = iso_from_ms(int(info["time"]["updated"]))
    shown = updated[:16].replace("T", " ") + " UTC"
    state = ' <span class="busy">busy</span>' if busy else ""
    return (
        f'<tr class="session"><td class="title">{escape(str(info.get("title", "")))}{state}'
        f'<div class="id">{escape(str(info["id"]))}</div></td>'
        f'<td class="directory">{escape(str(info.get("directory", "")))}</td>'
        f'<td class="updated"><time datetime="{escape(updated)}">{escape(shown)}</time></td>'
        f'<td class="messages">{int(entry["messages"])}</td></tr>'
    )


def page(url: str, sessions: list[dict[str, Any]], busy: set[str], *, password: bool) -> str:
    """The page for a server reached at ``url``, listing ``sessions`` (``{info, messages}``,
    most recent first)."""
    address = escape(url)
    login = " with user <code>opencode</code> and this server's password" if password else ""
    if sessions:
        rows = "".join(_row(entry, entry["info"]["id"] in busy) for entry in sessions)
        listing = (
            '<table id="sessions"><thead><tr><th>Session</th><th>Directory</th><th>Updated</th>'
            f"<th>Messages</th></tr></thead><tbody>{rows}</tbody></table>"
        )
        if len(sessions) == HOME_SESSIONS:
            listing += f'<p class="empty">The {HOME_SESSIONS} most recently updated are listed.</p>'
    else:
        listing = '<p class="empty" id="sessions">No sessions yet.</p>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>opensession</title>'
        '<meta name="viewport" content="width=device-width,initial-scale=1"><meta name="robots" content="noindex">'
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>opensession <small>{escape(__version__)}, an OpenCode-compatible server</small></h1>"
        '<section id="connect"><h2>Connect</h2><ul>'
        "<li>The OpenCode app (desktop, or <code>opencode web</code>): Settings → Servers → Add server, "
        f"address <code>{address}</code>{login}.</li>"
        f"<li>The OpenCode TUI: <code>opencode attach {address}</code></li>"
        f"<li>The command line here: <code>opensession run --attach {address} &quot;hello&quot;</code></li>"
        "</ul></section>"
        f"<section><h2>Sessions</h2>{listing}</section></body></html>"
    )


@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False, response_class=HTMLResponse)
async def home(request: Request, runtime: RuntimeDep, settings: SettingsDep) -> HTMLResponse:
    sessions = await runtime.session_overview(HOME_SESSIONS)
    busy = set(await runtime.statuses())
    url = f"{request.url.scheme}://{request.url.netloc}"
    return HTMLResponse(page(url, sessions, busy, password=bool(settings.password)), headers=HEADERS)
