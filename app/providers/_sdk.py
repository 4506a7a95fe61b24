"""What the providers called through an official SDK (Anthropic's, OpenAI's) share: the client made
on the first request (never at start-up: importing an SDK costs start-up time) and kept for
every later turn, so its connections are reused; the missing-key error; and the model's
continuation state kept per tool call id between the steps of a turn."""

from __future__ import annotations

from typing import Any

from app.providers.base import ProviderError, missing_key_message

# Continuation state is kept for this many tool calls (oldest dropped first: only recent turns
# are continued).
KEPT_CALLS = 1024


class SDKProvider:
    """``api_key`` None means the key is missing, which fails each request with a
    ProviderAuthError naming ``key_env``; ``base_url`` None lets the SDK read its own variable."""

    label: str  # the API's name in messages ("OpenAI")
    key_env: str  # the environment variable its key comes from

    def __init__(
        self,
        provider_id: str,
        api_key: str | None,
        base_url: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.id = provider_id
        self._api_key = api_key
        self._base_url = base_url
        self._headers = headers or {}
        self._client: Any = None
        # Per tool call id, what the API wants sent back with the assistant turn that made the call
        # (signed thinking, encrypted reasoning); our history keeps reasoning as text only.
        self._kept: dict[str, list[dict[str, Any]]] = {}

    def _client_class(self) -> Any:
        """The SDK's async client class, imported here (the first request)."""
        raise NotImplementedError

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
                api_key=self._api_key,
                base_url=self._base_url,
                default_headers=self._default_headers(),
                max_retries=0,  # the turn runner retries, with OpenCode's policy and status events
                timeout=300.0,
                http_client=self._http_client(),
            )
        return self._client

    def _check_key(self) -> None:
        if not self._api_key:
            raise ProviderError(
                missing_key_message(self.label, self.id, [self.key_env]),
                name="ProviderAuthError",
                provider_id=self.id,
            )

    def _keep(self, call_id: str, items: list[dict[str, Any]]) -> None:
        self._kept[call_id] = items
        while len(self._kept) > KEPT_CALLS:
            del self._kept[next(iter(self._kept))]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
