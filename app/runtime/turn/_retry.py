"""OpenCode's retry policy for provider failures: which errors are retried, and how long to wait.

Five retries at most; the wait honours ``retry-after-ms`` / ``retry-after`` headers, else grows
as 2 s * 2^(n-1) plus up to 25 % jitter, capped at 30 s when the provider sent no headers.
"""

from __future__ import annotations

import math
import random
import re
import time
from email.utils import parsedate_to_datetime

from app.providers.base import ProviderError

MAX_RETRIES = 5
_NO_HEADER_CAP_MS = 30_000
_ABSOLUTE_CAP_MS = 2**31 - 1
_RETRYABLE_TEXT = re.compile(
    r"\b(429|500|502|503|504|524)\b|rate.?limit|too many requests|overloaded|service unavailable|"
    r"internal|server error|provider returned error|network|connection|socket|ECONN|ETIMEDOUT|"
    r"fetch failed|timeout|try again|resource exhausted|exhausted|unavailable|temporarily at capacity",
    re.I,
)


def is_retryable(error: ProviderError) -> bool:
    if error.name == "ContextOverflowError" or error.name == "ProviderAuthError":
        return False
    if error.name == "APIError" and (error.is_retryable or (error.status_code or 0) >= 500):
        return True
    if error.status_code is not None and 400 <= error.status_code < 500 and error.status_code not in (408, 409, 429):
        return False
    return bool(_RETRYABLE_TEXT.search(error.message or ""))


def retry_delay_ms(error: ProviderError, attempt: int) -> int:
    headers = {k.lower(): v for k, v in error.response_headers.items()}
    if "retry-after-ms" in headers:
        try:
            return min(_ABSOLUTE_CAP_MS, max(0, math.ceil(float(headers["retry-after-ms"]))))
        except ValueError:
            pass
    if "retry-after" in headers:
        value = headers["retry-after"]
        try:
            return min(_ABSOLUTE_CAP_MS, max(0, math.ceil(float(value) * 1000)))
        except ValueError:
            try:
                return min(
                    _ABSOLUTE_CAP_MS, max(0, int(parsedate_to_datetime(value).timestamp() * 1000 - time.time() * 1000))
                )
            except (TypeError, ValueError):
                pass
    base: int = 2000 * 2 ** (attempt - 1)
    delay = math.ceil(base + base * 0.25 * random.random())
    return min(delay, _NO_HEADER_CAP_MS if not headers else _ABSOLUTE_CAP_MS)


def status_message(error: ProviderError) -> str:
    text = error.message or ""
    if re.search(r"overloaded", text, re.I):
        return "Provider is overloaded"
    if error.status_code == 429 or re.search(r"too many requests|rate.?limit", text, re.I):
        return "Too Many Requests"
    return text
