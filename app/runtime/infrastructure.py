"""What every domain is built on: the database, the durable event log with its live bus, read
queries, the project configuration and the model providers. The Runtime creates it once and hands
it to each domain's builder, so a domain's constructor names the domains it uses, not a dozen
loose services."""

from __future__ import annotations

from dataclasses import dataclass

from app.config import ConfigLoader
from app.events.bus import EventBus
from app.events.log import EventLog
from app.providers.credentials import CredentialFile, Credentials, Keeper
from app.providers.registry import ProviderRegistry
from app.settings import Settings
from app.store.credentials import SharedCredentials
from app.store.database import Database, open_database
from app.store.queries import Queries


@dataclass(frozen=True, slots=True)
class Infrastructure:
    settings: Settings
    db: Database
    bus: EventBus
    log: EventLog
    queries: Queries
    config: ConfigLoader
    registry: ProviderRegistry

    @classmethod
    def create(cls, settings: Settings) -> Infrastructure:
        db = open_database(settings.database_url, writers=settings.db_writers, stalled_after_s=settings.lease_seconds)
        bus = EventBus(settings.subscriber_queue_size, settings.subscriber_queue_bytes)
        config = ConfigLoader(settings.config_dir)
        # Kept where every process that may drain a turn reads them.
        keeper: Keeper = SharedCredentials(db) if db.shared else CredentialFile(settings.data_path / "auth.json")
        registry = ProviderRegistry(config, Credentials(keeper))
        return cls(settings, db, bus, EventLog(db, bus), Queries(db), config, registry)
