"""Connecting providers through the V2 integration routes: changes to the saved credentials,
announced as OpenCode announces them.

Every change ends with ``integration.updated``; one that changed a provider's credential first
says which provider (``integration.connection.updated``). Renaming or removing an id no
credential has changes nothing and is not an error (OpenCode answers it with a 204 too). Both
events are live only: a client that missed them reads the list again."""

from __future__ import annotations

from typing import Any

from app import ids
from app.events.log import EventLog
from app.events.model import Event
from app.providers import integrations
from app.providers.credentials import DEFAULT_LABEL, Credentials
from app.runtime.errors import InvalidInput


class Integrations:
    def __init__(self, credentials: Credentials, log: EventLog) -> None:
        self._credentials = credentials
        self._log = log

    def all(self) -> list[dict[str, Any]]:
        return integrations.integrations(self._credentials)

    def get(self, integration_id: str) -> dict[str, Any] | None:
        return integrations.find(integration_id, self._credentials)

    async def connect_key(self, integration_id: str, key: str, label: str | None, directory: str) -> None:
        """Save ``key`` as the integration's credential (replacing the one it had)."""
        if self.get(integration_id) is None:
            raise InvalidInput(f"Unknown integration: {integration_id}", kind="Params", field="integrationID")
        if not key.strip():
            raise InvalidInput("The key must not be empty", field="key")
        await self._credentials.connect(integration_id, key, label or DEFAULT_LABEL, ids.new_id("credential"))
        self._announce(integration_id, directory)

    async def relabel(self, credential_id: str, label: str, directory: str) -> None:
        self._announce(await self._credentials.relabel(credential_id, label), directory)

    async def remove(self, credential_id: str, directory: str) -> None:
        self._announce(await self._credentials.forget(credential_id), directory)

    def _announce(self, integration_id: str | None, directory: str) -> None:
        if integration_id is not None:
            props = {"integrationID": integration_id}
            self._log.publish(Event("integration.connection.updated", props, None, directory))
        self._log.publish(Event("integration.updated", {}, None, directory))
