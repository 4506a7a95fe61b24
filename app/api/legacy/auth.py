"""Provider credentials, as OpenCode's control routes: ``PUT /auth/{providerID}`` saves an ``Auth``
(``api``, ``oauth`` or ``wellknown``) and ``DELETE`` forgets it, both answering ``true``;
``GET /provider/auth`` lists how each provider can be connected. A saved key is never answered,
logged or announced: these routes only ever return booleans and method labels."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from app.api.deps import CredentialsDep, DirectoryDep, ProvidersDep
from app.api.responses import JSONBody

router = APIRouter(tags=["control"])


class _Strict(BaseModel):
    """Unknown fields are refused and an optional field may be left out but not be null, as
    OpenCode's schemas say."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("metadata", "accountId", "enterpriseUrl", mode="before", check_fields=False)
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("Expected a value, got null")
        return value


class ApiAuth(_Strict):
    type: Literal["api"]
    key: str
    metadata: dict[str, str] | SkipJsonSchema[None] = None


class OAuth(_Strict):
    type: Literal["oauth"]
    refresh: str
    access: str
    expires: int = Field(ge=0)
    accountId: str | SkipJsonSchema[None] = None
    enterpriseUrl: str | SkipJsonSchema[None] = None


class WellKnownAuth(_Strict):
    type: Literal["wellknown"]
    key: str
    token: str


Auth = Annotated[ApiAuth | OAuth | WellKnownAuth, Field(discriminator="type")]

# How OpenCode's TUI offers to connect a provider: the API-key methods OpenCode's answer labels
# its own way (opensession has no OAuth flows, so only ``api`` methods are offered); any other
# provider is connected with a plain API key.
_API_LABELS = {
    "openai": "Manually enter API Key",
    "gitlab": "GitLab Personal Access Token",
    "poe": "Manually enter API Key",
    "cloudflare-workers-ai": "API key",
    "cloudflare-ai-gateway": "Gateway API token",
    "azure": "API key",
    "digitalocean": "Paste Model Access Key",
    "snowflake-cortex": "Paste PAT or bearer token manually",
    "xai": "Manually enter API Key",
}
_DEFAULT_LABEL = "API key"


@router.put("/auth/{providerID}", operation_id="auth.set", summary="Set auth credentials")
async def auth_set(credentials: CredentialsDep, providerID: str, body: Annotated[Auth, Body()]) -> Response:
    await credentials.set(providerID, body.model_dump(exclude_none=True))
    return JSONBody(True)


@router.delete("/auth/{providerID}", operation_id="auth.remove", summary="Remove auth credentials")
async def auth_remove(credentials: CredentialsDep, providerID: str) -> Response:
    await credentials.remove(providerID)
    return JSONBody(True)


@router.get("/provider/auth", operation_id="provider.auth", summary="Get provider auth methods")
async def provider_auth(providers: ProvidersDep, directory: DirectoryDep) -> Response:
    methods = {pid: [{"type": "api", "label": label}] for pid, label in _API_LABELS.items()}
    for provider in providers.catalog(directory):
        if provider["source"] != "custom":  # the built-in offline model needs no key
            methods.setdefault(provider["id"], [{"type": "api", "label": _DEFAULT_LABEL}])
    return JSONBody(methods)
