"""webfetch: fetch one http(s) URL and return it as markdown, text or html (OpenCode's tool).

Bounded: at most MAX_BYTES of body (a larger Content-Length is refused before reading), at most
MAX_TIMEOUT seconds however long the model asks for, and an abort cancels the request. Asks the
``webfetch`` permission with the URL as its pattern. An image answer is reported, not attached
(tool results here are text). HTML converters are imported on first use
(start-up time is tracked)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema, truncate

MAX_BYTES = 5 * 1024 * 1024
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 120.0
FORMATS = ("text", "markdown", "html")
_ACCEPT = {
    "markdown": "text/markdown;q=1.0, text/x-markdown;q=0.9, text/plain;q=0.8, text/html;q=0.7, */*;q=0.1",
    "text": "text/plain;q=1.0, text/markdown;q=0.9, text/html;q=0.8, */*;q=0.1",
    "html": "text/html;q=1.0, application/xhtml+xml;q=0.9, text/plain;q=0.8, text/markdown;q=0.7, */*;q=0.1",
}
_SKIPPED_TAGS = ("script", "style", "noscript", "iframe", "object", "embed", "meta", "link")

DESCRIPTION = """- Fetches content from a specified URL
- Takes a URL and optional format as input
- Fetches the URL content, converts to requested format (markdown by default)
- Returns the content in the specified format
- Use this tool when you need to retrieve and analyze web content

Usage notes:
  - IMPORTANT: if another tool is present that offers better web fetching capabilities, is more targeted to the task, or has fewer restrictions, prefer using that tool instead of this one.
  - The URL must be a fully-formed valid URL
  - Format options: "markdown" (default), "text", or "html"
  - This tool is read-only and does not modify any files
  - Results may be summarized if the content is very large
"""  # noqa: E501  (OpenCode's wording, less the https upgrade it does not do either)


def _cleaned(html: str) -> Any:
    """The parsed page without what never reads as content (scripts, styles, embeds)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(_SKIPPED_TAGS)):
        tag.decompose()
    return soup


def html_to_markdown(html: str) -> str:
    from markdownify import MarkdownConverter

    converter = MarkdownConverter(heading_style="ATX", bullets="-", code_language="")
    text: str = converter.convert_soup(_cleaned(html))
    return text.strip()


def html_to_text(html: str) -> str:
    text: str = _cleaned(html).get_text()
    return text.strip()


class WebFetch:
    name = "webfetch"
    description = DESCRIPTION
    parameters = schema(
        {
            "url": {"type": "string", "description": "The URL to fetch content from"},
            "format": {
                "type": "string",
                "enum": list(FORMATS),
                "description": "The format to return the content in (text, markdown, or html). Defaults to markdown.",
                "default": "markdown",
            },
            "timeout": {"type": "number", "description": "Optional timeout in seconds (max 120)"},
        },
        ["url"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        url = require(args, "url")
        fmt = args.get("format") or "markdown"
        if fmt not in FORMATS:
            raise ToolError(f"format must be one of {', '.join(FORMATS)}")
        if not url.startswith(("http://", "https://")):
            raise ToolError("URL must start with http:// or https://")
        timeout = args.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ToolError("timeout must be a positive number of seconds")
        await ctx.ask("webfetch", [url], ["*"], {"url": url, "format": fmt, "timeout": timeout})
        seconds = min(float(timeout or DEFAULT_TIMEOUT), MAX_TIMEOUT)
        try:
            body, content_type = await ctx.signal.race(asyncio.wait_for(_fetch(url, fmt), seconds))
        except TimeoutError:
            raise ToolError(f"Request timed out after {seconds:g} seconds") from None
        title = f"{url} ({content_type})"
        mime = content_type.split(";")[0].strip().lower()
        if mime.startswith("image/") and mime != "image/svg+xml":
            # OpenCode attaches the image; tool results here carry text only, so the model is told.
            return ToolResult("Image fetched successfully (images are not attached here)", title=title)
        text = body.decode("utf-8", errors="replace")
        if "text/html" in content_type and fmt == "markdown":
            text = await asyncio.to_thread(html_to_markdown, text)
        elif "text/html" in content_type and fmt == "text":
            text = await asyncio.to_thread(html_to_text, text)
        output, truncated = truncate(text)
        return ToolResult(output, title=title, metadata={"truncated": truncated} if truncated else {})


async def _fetch(url: str, fmt: str) -> tuple[bytes, str]:
    """The body (at most MAX_BYTES) and Content-Type of a 2xx answer; redirects are followed."""
    import httpx  # on first use: start-up time is tracked

    headers = {"Accept": _ACCEPT[fmt], "Accept-Language": "en-US,en;q=0.9", "User-Agent": "opensession-webfetch"}
    try:
        async with (
            httpx.AsyncClient(follow_redirects=True, max_redirects=10) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            if not response.is_success:
                raise ToolError(f"Request failed with status code: {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BYTES:
                raise ToolError("Response too large (exceeds 5MB limit)")
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > MAX_BYTES:
                    raise ToolError("Response too large (exceeds 5MB limit)")
            return bytes(body), response.headers.get("content-type", "")
    except httpx.HTTPError as exc:
        raise ToolError(f"Request failed: {exc}") from None
