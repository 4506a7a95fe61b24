"""One reading of a provider's HTTP error answer, shared by every provider, so that a 401, a
context overflow or a 429 with ``retry-after`` is named the same way whichever API said it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.providers.base import ProviderError

# Messages and codes meaning the prompt does not fit the model's context (OpenAI, Anthropic, and
# the OpenAI-compatible servers' wordings).
OVERFLOW = re.compile(
    r"prompt is too long|context window|context.length|maximum context|too many tokens|context_length_exceeded", re.I
)
# Kept on the error: the runner reads the retry delay from them; the request ids help support.
HEADERS_KEPT = ("retry-after", "retry-after-ms", "request-id", "x-request-id")
_AUTH_TYPES = {"authentication_error", "permission_error", "invalid_api_key"}


def error_object(body: Any) -> dict[str, Any]:
    """The ``{"message", "type", "code"}`` object of an error body (``{"error": {...}}`` or the
    object itself); empty when the body is not JSON."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return {}
    error = body.get("error", body) if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def http_error(
    provider_id: str,
    status: int,
    body: Any,
    headers: Mapping[str, str],
    *,
    retryable: bool = False,
    fallback: str = "",
) -> ProviderError:
    """An HTTP error answer (``body`` parsed JSON or raw text) as OpenCode names it: 401/403 are a
    ProviderAuthError, a context overflow a ContextOverflowError, anything else an APIError,
    retryable on 408, 409, 429 and 5xx (or when the caller knows better: ``retryable``)."""
    error = error_object(body)
    kind, code = error.get("type"), error.get("code")
    message = str(error.get("message") or "") or fallback or (body if isinstance(body, str) else "")
    raw = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
    if status in (401, 403) or kind in _AUTH_TYPES or code in _AUTH_TYPES:
        return ProviderError(message or "Unauthorized", name="ProviderAuthError", provider_id=provider_id)
    if OVERFLOW.search(message) or OVERFLOW.search(str(code or "")):
        return ProviderError(message or "Context length exceeded", name="ContextOverflowError", response_body=raw)
    lowered = {k.lower(): v for k, v in headers.items()}
    return ProviderError(
        message or f"HTTP {status}",
        status_code=status,
        is_retryable=retryable or status in (408, 409, 429) or status >= 500,
        response_headers={k: lowered[k] for k in HEADERS_KEPT if k in lowered},
        response_body=raw,
    )
