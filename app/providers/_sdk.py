"""What the providers called through an official SDK (Anthropic's, OpenAI's) share: the client made
on the first request (never at start-up: importing an SDK costs start-up time) and kept for
every later turn, so its connections are reused; the missing-key error; and the model's
continuation state kept per tool call id between the steps of a turn."""

from __future__ import annotations

from typing import Any

from app.providers.connection import Connection

# Continuation state is kept for this many tool calls (oldest dropped first: only recent turns
# are continued).
KEPT_CALLS = 1024


class SDKProvider:
    """A missing key fails each request with a ProviderAuthError naming where one may come from;
    ``connection.base_url`` None lets the SDK read its own variable."""

    def __init__(self, connection: Connection) -> None:
        self.id = connection.provider_id
        self.connection = connection
        self._headers = connection.header_map
        self._client: Any = None
        # Per tool call id, what the API wants sent back with the assistant turn that made the call
        # (signed thinking, encrypted reasoning); our history keeps reasoning as text only.
        self._kept: dict[str, list[dict[str, Any]]] = {}

    def _client_class(self) -> Any:
        """The SDK's async client class, imported here (the first request)."""
        raise NotImplementedError

    def _sdk_base_url(self) -> str | None:
        """``connection.base_url`` as the SDK wants it (the same, for SDKs that agree with OpenCode)."""
        return self.connection.base_url

    def _http_client(self) -> Any:
        """The SDK's HTTP client on aiohttp's pool (its ``DefaultAioHttpClient``), for the reason
        ``app/providers/http.py`` gives: httpx's own transport costs several times the CPU per
        streamed request."""
        raise NotImplementedError

    def _default_headers(self) -> dict[str, str]:
        """Headers sent with every request: opencode.json's ``options.headers`` (and any the API's
        provider adds by default)."""
        return self._headers

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = self._client_class()(
                api_key=self.connection.api_key,
                base_url=self._sdk_base_url(),
                default_headers=self._default_headers(),
                max_retries=0,  # the turn runner retries, with OpenCode's policy and status events
                timeout=self.connection.timeout_s,
                http_client=self._http_client(),
            )
        return self._client

    def _check_key(self) -> None:
        missing = self.connection.missing_key()
        if missing is not None:
            raise missing

    def _keep(self, call_id: str, items: list[dict[str, Any]]) -> None:
        self._kept[call_id] = items
        while len(self._kept) > KEPT_CALLS:
            del self._kept[next(iter(self._kept))]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
