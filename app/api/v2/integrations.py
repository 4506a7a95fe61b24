"""V2 integrations and credentials (``/api/integration...``, ``/api/credential/{id}``): the ways
each catalog provider can be connected and its connections, answered as ``{location, data}``; a
key connected here is the provider's saved credential, the one ``PUT /auth/{providerID}`` saves.

opensession has no OAuth flows and offers no OAuth method, so the OAuth routes answer a 400
naming the method or attempt (OpenCode answers these with a 500), except cancelling an attempt,
which has nothing to cancel (a 204, as OpenCode's)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import errors
from app.api.deps import IntegrationsDep, LocationDep
from app.api.v2.pty import located
from app.api.v2.schemas import ConnectKeyBody, ConnectOAuthBody, CredentialUpdate, OAuthComplete

router = APIRouter(prefix="/api", tags=["v2"])


def _no_oauth(what: str) -> Response:
    return errors.tagged(400, "InvalidRequestError", f"{what}: opensession has no OAuth connections", kind="Params")


@router.get("/integration", operation_id="v2.integration.list", summary="List integrations")
async def integration_list(integrations: IntegrationsDep, directory: LocationDep) -> Response:
    return await located(directory, integrations.all())


@router.get(
    "/integration/attempt/{attemptID}",
    operation_id="v2.integration.attempt.status",
    summary="Get OAuth attempt status",
)
async def attempt_status(directory: LocationDep, attemptID: str) -> Response:
    return _no_oauth(f"Unknown OAuth attempt {attemptID}")


@router.delete(
    "/integration/attempt/{attemptID}",
    operation_id="v2.integration.attempt.cancel",
    summary="Cancel OAuth connection",
    status_code=204,
)
async def attempt_cancel(directory: LocationDep, attemptID: str) -> Response:
    return Response(status_code=204)


@router.post(
    "/integration/attempt/{attemptID}/complete",
    operation_id="v2.integration.attempt.complete",
    summary="Complete OAuth connection",
)
async def attempt_complete(directory: LocationDep, attemptID: str, body: OAuthComplete) -> Response:
    return _no_oauth(f"Unknown OAuth attempt {attemptID}")


@router.get("/integration/{integrationID}", operation_id="v2.integration.get", summary="Get integration")
async def integration_get(integrations: IntegrationsDep, directory: LocationDep, integrationID: str) -> Response:
    return await located(directory, integrations.get(integrationID))  # null when unknown


@router.post(
    "/integration/{integrationID}/connect/key",
    operation_id="v2.integration.connect.key",
    summary="Connect with key",
    status_code=204,
)
async def connect_key(
    integrations: IntegrationsDep, directory: LocationDep, integrationID: str, body: ConnectKeyBody
) -> Response:
    await integrations.connect_key(integrationID, body.key, body.label, directory)
    return Response(status_code=204)


@router.post(
    "/integration/{integrationID}/connect/oauth",
    operation_id="v2.integration.connect.oauth",
    summary="Begin OAuth connection",
)
async def connect_oauth(directory: LocationDep, integrationID: str, body: ConnectOAuthBody) -> Response:
    return _no_oauth(f"No OAuth method {body.methodID} for {integrationID}")


@router.patch(
    "/credential/{credentialID}", operation_id="v2.credential.update", summary="Update credential", status_code=204
)
async def credential_update(
    integrations: IntegrationsDep, directory: LocationDep, credentialID: str, body: CredentialUpdate
) -> Response:
    await integrations.relabel(credentialID, body.label, directory)
    return Response(status_code=204)


@router.delete(
    "/credential/{credentialID}", operation_id="v2.credential.remove", summary="Remove credential", status_code=204
)
async def credential_remove(integrations: IntegrationsDep, directory: LocationDep, credentialID: str) -> Response:
    await integrations.remove(credentialID, directory)
    return Response(status_code=204)
