"""websearch: search the web. OpenCode's tool (name, parameters, description, permission, output
and title), on one of three backends a team can pay for or run itself:

- ``exa``: Exa's MCP endpoint, called exactly as OpenCode calls it: one JSON-RPC ``tools/call``
  of ``web_search_exa`` POSTed with no MCP session, answered as JSON or as server-sent events;
  ``EXA_API_KEY`` goes in the ``exaApiKey`` query parameter (without one Exa's free tier
  answers, rate-limited).
- ``parallel``: Parallel's MCP endpoint, the same way (``web_search``, the query as objective and
  sole search query; ``PARALLEL_API_KEY`` as a bearer token).
- ``searxng``: a SearXNG instance's JSON API (``GET /search?q=...&format=json``; ``json`` must be
  listed in its ``search.formats``). It has no live crawl, search types or context string:
  ``livecrawl`` and ``type`` are ignored, and the first page's results become title, URL, date
  and snippet blocks (its direct answers first), ``numResults`` of them, cut at
  ``contextMaxCharacters``.

Whether the model is offered the tool, and which backend a session uses, is ``ToolSettings``'
decision (off by default, as in OpenCode); a call where it is off fails before anything is sent.
Asks the ``websearch`` permission with the query as its pattern. Bounded: 25 seconds (OpenCode's
limit), 1 MB of answer, and an abort cancels the request. Where Exa or Parallel answer with an
MCP error, the call fails with their message (OpenCode would hand the model the error text as
if it were results)."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any
from urllib.parse import urlencode

from app import __version__
from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema, truncate
from app.runtime.tools._settings import ToolSettings

NAME = "websearch"
NO_RESULTS = "No search results found. Please try a different query."
TIMEOUT_SECONDS = 25.0
MAX_BYTES = 1024 * 1024
DEFAULT_RESULTS = 8
DEFAULT_CONTEXT_CHARS = 10_000
LIVECRAWL = ("fallback", "preferred")
TYPES = ("auto", "fast", "deep")
LABELS = {"exa": "Exa Web Search", "parallel": "Parallel Web Search", "searxng": "SearXNG Web Search"}

DESCRIPTION = """- Search the web using the session's web search provider - performs real-time web searches and can scrape content from specific URLs
- Provides up-to-date information for current events and recent data
- Supports configurable result counts and returns the content from the most relevant websites
- Use this tool for accessing information beyond knowledge cutoff
- Searches are performed automatically within a single API call

Usage notes:
  - Supports live crawling modes when available: 'fallback' (backup if cached unavailable) or 'preferred' (prioritize live crawling)
  - Search types when available: 'auto' (balanced), 'fast' (quick results), 'deep' (comprehensive search)
  - Configurable context length for optimal LLM integration
  - Domain filtering and advanced search options available

The current year is {{year}}. You MUST use this year when searching for recent information or current events
- Example: If the current year is 2026 and the user asks for "latest AI news", search for "AI news 2026", NOT "AI news 2025"
"""  # noqa: E501  (OpenCode 1.18's wording)

PARAMETERS = schema(
    {
        "query": {"type": "string", "description": "Websearch query"},
        "numResults": {"type": "number", "description": "Number of search results to return (default: 8)"},
        "livecrawl": {
            "type": "string",
            "enum": list(LIVECRAWL),
            "description": "Live crawl mode - 'fallback': use live crawling as backup if cached content unavailable, "
            "'preferred': prioritize live crawling (default: 'fallback')",
        },
        "type": {
            "type": "string",
            "enum": list(TYPES),
            "description": "Search type - 'auto': balanced search (default), 'fast': quick results, "
            "'deep': comprehensive search",
        },
        "contextMaxCharacters": {
            "type": "number",
            "description": "Maximum characters for context string optimized for LLMs (default: 10000)",
        },
    },
    ["query"],
)


def _number(args: dict[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ToolError(f"{name} must be a positive number")
    return value


def _choice(args: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = args.get(name)
    if value is not None and value not in allowed:
        raise ToolError(f"{name} must be one of {', '.join(allowed)}")
    return value


class WebSearch:
    name = NAME
    parameters = PARAMETERS

    @property
    def description(self) -> str:
        return DESCRIPTION.replace("{{year}}", str(datetime.date.today().year))

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        query = require(args, "query")
        search = {
            "query": query,
            "numResults": _number(args, "numResults"),
            "livecrawl": _choice(args, "livecrawl", LIVECRAWL),
            "type": _choice(args, "type", TYPES),
            "contextMaxCharacters": _number(args, "contextMaxCharacters"),
        }
        settings = ctx.services.settings
        if not settings.websearch_offered(ctx.provider_id):
            raise ToolError(
                "Web search is not enabled on this server (OPENSESSION_WEBSEARCH=exa|parallel|searxng, "
                "or OpenCode's OPENCODE_ENABLE_EXA=1, enables it)"
            )
        backend = settings.websearch_backend(ctx.session["id"])
        label = LABELS[backend]
        await ctx.progress({"provider": backend})
        await ctx.ask(NAME, [query], ["*"], {**search, "provider": backend})
        try:
            found = await ctx.signal.race(asyncio.wait_for(_search(backend, settings, search, ctx), TIMEOUT_SECONDS))
        except TimeoutError:
            raise ToolError(f"{label} request timed out after {TIMEOUT_SECONDS:g} seconds") from None
        output, truncated = truncate(found or NO_RESULTS)
        metadata: dict[str, Any] = {"provider": backend}
        if truncated:
            metadata["truncated"] = True
        return ToolResult(output, title=f"{label}: {query}", metadata=metadata)


async def _search(backend: str, settings: ToolSettings, search: dict[str, Any], ctx: ToolContext) -> str | None:
    if backend == "searxng":
        assert settings.searxng_url is not None  # ToolSettings refuses searxng without it
        return await _searxng(settings.searxng_url, search)
    if backend == "parallel":
        headers = {"User-Agent": f"opensession/{__version__}"}
        if settings.parallel_api_key:
            headers["Authorization"] = f"Bearer {settings.parallel_api_key}"
        arguments = {"objective": search["query"], "search_queries": [search["query"]], "session_id": ctx.session["id"]}
        if ctx.model_id:
            arguments["model_name"] = ctx.model_id[:100]
        return await _mcp_call(settings.parallel_url, "web_search", arguments, headers, LABELS[backend])
    url = settings.exa_url
    if settings.exa_api_key:
        url += ("&" if "?" in url else "?") + urlencode({"exaApiKey": settings.exa_api_key})
    arguments = {
        "query": search["query"],
        "type": search["type"] or "auto",
        "numResults": search["numResults"] or DEFAULT_RESULTS,
        "livecrawl": search["livecrawl"] or "fallback",
    }
    if search["contextMaxCharacters"] is not None:
        arguments["contextMaxCharacters"] = search["contextMaxCharacters"]
    return await _mcp_call(url, "web_search_exa", arguments, {}, LABELS[backend])


async def _mcp_call(url: str, tool: str, arguments: dict[str, Any], headers: dict[str, str], label: str) -> str | None:
    """One stateless MCP ``tools/call``, as OpenCode makes it: the first text of the result."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    status, raw = await _request(
        "POST", url, payload=body, headers={"Accept": "application/json, text/event-stream", **headers}
    )
    if not 200 <= status < 300:
        raise ToolError(f"{label} failed with status code: {status}{_detail(raw)}")
    trimmed = raw.strip()  # one JSON answer, or server-sent events (their ``data:`` lines)
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    messages = [trimmed] if trimmed.startswith("{") else events
    for message in messages:
        text = _result_text(message, label)
        if text:
            return text
    return None


def _result_text(message: str, label: str) -> str | None:
    try:
        data = json.loads(message)
    except ValueError:
        raise ToolError(f"{label} answered something that is not JSON-RPC: {message[:200]}") from None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        raise ToolError(f"{label} failed: {error.get('message') or error}")
    result = data.get("result")
    if not isinstance(result, dict):
        return None
    content = result.get("content")
    texts = [c.get("text") for c in content if isinstance(c, dict)] if isinstance(content, list) else []
    text = next((t for t in texts if isinstance(t, str) and t), None)
    if result.get("isError"):
        raise ToolError(f"{label} failed: {text or 'no reason given'}")
    return text


def _detail(raw: str) -> str:
    """The message of a JSON error answer (``{"message"}``, ``{"error"}`` or ``{"error": {"message"}}``)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    message = (data.get("message") or data.get("error")) if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    return f": {message[:300]}" if isinstance(message, str) and message else ""


async def _searxng(base: str, search: dict[str, Any]) -> str | None:
    status, raw = await _request(
        "GET", base.rstrip("/") + "/search", params={"q": search["query"], "format": "json"}, headers={}
    )
    if status == 403:
        raise ToolError("SearXNG refused the JSON format: list json under search.formats in its settings.yml")
    if status == 429:
        raise ToolError("SearXNG's limiter refused the request: let this server's address through (limiter.toml)")
    if not 200 <= status < 300:
        raise ToolError(f"SearXNG failed with status code: {status}")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ToolError("SearXNG did not answer JSON (is the URL the instance's address?)") from None
    if not isinstance(data, dict):
        raise ToolError("SearXNG did not answer a search result")
    count = int(search["numResults"] or DEFAULT_RESULTS)
    limit = int(search["contextMaxCharacters"] or DEFAULT_CONTEXT_CHARS)
    text = searxng_text(data, count)
    if text is None:
        failed = [e for e in data.get("unresponsive_engines") or [] if isinstance(e, list) and len(e) == 2]
        if failed:
            return NO_RESULTS + " Engines that did not answer: " + ", ".join(f"{n} ({why})" for n, why in failed)
        return None
    return text[:limit]


def searxng_text(data: dict[str, Any], count: int) -> str | None:
    """SearXNG's direct answers, then its first ``count`` results, as blocks for the model."""
    blocks = []
    for answer in data.get("answers") or []:
        # A string before SearXNG 2025.3, an object ({answer, url, ...}) since.
        said = answer.get("answer") if isinstance(answer, dict) else answer
        if isinstance(said, str) and said:
            url = answer.get("url") if isinstance(answer, dict) else None
            blocks.append(f"Answer: {said}" + (f"\nURL: {url}" if url else ""))
    results = [r for r in data.get("results") or [] if isinstance(r, dict) and isinstance(r.get("url"), str)]
    for result in results[:count]:
        lines = [f"Title: {result.get('title') or result['url']}", f"URL: {result['url']}"]
        if result.get("publishedDate"):
            lines.append(f"Published Date: {result['publishedDate']}")
        if result.get("content"):
            lines.append(f"Text: {result['content']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) or None


async def _request(
    method: str, url: str, *, headers: dict[str, str], params: dict[str, str] | None = None, payload: Any = None
) -> tuple[int, str]:
    """The status and body (at most MAX_BYTES) of one request; a network failure is a ToolError."""
    import httpx  # on first use: start-up time is tracked

    try:
        async with (
            httpx.AsyncClient(follow_redirects=True, max_redirects=5) as client,
            client.stream(method, url, params=params, json=payload, headers=headers) as response,
        ):
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > MAX_BYTES:
                    raise ToolError("Search response too large (exceeds 1MB limit)")
            return response.status_code, body.decode("utf-8", errors="replace")
    except httpx.HTTPError as exc:
        raise ToolError(f"Search request failed: {exc}") from None
