"""Server settings, from the command line or ``OPENSESSION_*`` environment variables."""

from __future__ import annotations

import socket
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from platformdirs import user_data_dir
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_data_dir() -> str:
    return user_data_dir("opensession", appauthor=False)


def default_database_path() -> Path:
    return Path(default_data_dir()) / "opensession.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPENSESSION_", extra="ignore")

    hostname: str = "127.0.0.1"
    port: int = 4096
    # A filesystem path (SQLite) or a full SQLAlchemy URL (postgresql+asyncpg://...).
    db: str = Field(default_factory=lambda: str(default_database_path()))
    # The directory a request is scoped to when it names none (OpenCode uses the server's cwd).
    directory: str = Field(default_factory=lambda: str(Path.cwd()))
    # HTTP basic auth, as OpenCode's OPENCODE_SERVER_PASSWORD / OPENCODE_SERVER_USERNAME.
    password: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENSESSION_PASSWORD", "OPENCODE_SERVER_PASSWORD")
    )
    username: str = Field(
        default="opencode", validation_alias=AliasChoices("OPENSESSION_USERNAME", "OPENCODE_SERVER_USERNAME")
    )
    # Binding a non-loopback address without a password needs this explicit opt-in.
    allow_public: bool = False
    max_body_bytes: int = 10 * 1024 * 1024
    # The import route's own limit (``POST /opensession/import``): a long session's export is
    # tens of megabytes, and the route streams it to a temporary file, so it holds little of it.
    max_import_bytes: int = 1024 * 1024 * 1024
    heartbeat_seconds: float = 10.0
    # Events a live subscriber may lag behind before its stream is closed (it can resume by id).
    subscriber_queue_size: int = 4096
    # Bytes of frames a live subscriber may have pending before its stream is closed, likewise.
    subscriber_queue_bytes: int = 8 * 1024 * 1024
    # Seconds a stream's write may wait for a client that does not read before the stream closes.
    stream_send_timeout: float = 30.0
    # Seconds an idle HTTP connection is kept open. Well beyond clients' pool expiry (5 s is
    # common; uvicorn's default is 5 s too), so the server never closes one as a client reuses it.
    keep_alive_seconds: int = 75
    # How long a stopping server (SIGTERM) answers the requests it had read before it gives up on
    # them (503 ``ServerStoppingError``): a synchronous prompt waits for its reply meanwhile.
    # Keep it under the orchestrator's own grace (Kubernetes: terminationGracePeriodSeconds).
    graceful_seconds: float = 5.0
    # How often a streaming text/reasoning part is written to the database while deltas arrive.
    part_flush_seconds: float = 0.25
    # How long a step's opening (its reply begun, its prompts taken) waits to be stored with the
    # step's first part rather than on its own: well under what a person notices, well over an
    # instant model's first token (one commit less per step).
    step_opening_grace_seconds: float = 0.2
    # Several processes on one PostgreSQL database: how long a drain lease lasts without renewal,
    # so the longest a dead process's sessions wait before another process takes them over.
    lease_seconds: float = 10.0
    # PostgreSQL: write transactions one process runs at once, each on a connection of its own.
    # A transaction holds its connection for its round trips, so a database far away (several
    # milliseconds a round trip) wants more; each one more is a connection of max_connections.
    db_writers: int = Field(default=8, ge=1, le=64)
    # Several processes: the address the others reach this one at (they forward requests for its
    # terminals there). Default: http://<hostname>:<port>, the machine's name if bound to all.
    advertise_url: str | None = None
    # Where the server keeps its own files: the default database, saved provider keys (on SQLite),
    # worktrees and a lone process's snapshot repositories.
    data_dir: str = Field(default_factory=default_data_dir)
    # Terminal output a pty keeps for replay (UTF-16 code units, as OpenCode's cursors count them).
    pty_buffer_chars: int = 2 * 1024 * 1024
    # How long a terminal outlives its server (a restart, a crash) waiting for the next server of
    # the same database on this machine to take it up; 0: terminals end with their server.
    pty_orphan_seconds: float = Field(default=60.0, ge=0)
    # Overrides the user config directory that the global opencode.json (and agents, commands...)
    # is read from and ``PATCH /global/config`` writes (the image puts it on its data volume).
    config_dir: str | None = None
    # Browser origins allowed besides the built-in ones (loopback, the desktop app, opencode.ai):
    # ``--cors ORIGIN`` (repeatable) or OPENSESSION_CORS="https://a.example,https://b.example".
    cors: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Host names a request may carry besides localhost, IP addresses and ``hostname`` when no
    # password is set (the DNS-rebinding guard, app/api/browser.py): ``--allow-host NAME``
    # (repeatable) or OPENSESSION_ALLOWED_HOSTS="a.example,b.example"; ``*`` allows any.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Prometheus metrics at ``/metrics`` (``--metrics`` or OPENSESSION_METRICS=1). Off by default:
    # importing the client adds to start-up time, and recording adds to every turn (bench/metrics.py).
    metrics: bool = False
    # The log's format: ``text`` (lines for people) or ``json`` (one object a line, with the
    # request, session and process ids; ``--log-format json``).
    log_format: str = "text"

    @field_validator("cors", "allowed_hosts", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("advertise_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"advertise_url must be http(s)://HOST[:PORT], not {value!r}")
        return value

    @property
    def request_hosts(self) -> list[str] | None:
        """The host names requests may carry, or None when any may (a password is set)."""
        if self.password or "*" in self.allowed_hosts:
            return None
        return [self.hostname, *self.allowed_hosts]

    @property
    def reachable_url(self) -> str:
        """Where other processes of a cluster reach this one (``advertise_url`` or its default)."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = self.hostname
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @cached_property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @cached_property
    def database_url(self) -> str:
        if "://" in self.db:
            return self.db
        path = Path(self.db).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{path}"
