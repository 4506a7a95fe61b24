"""Provider credentials saved with ``PUT /auth/{providerID}`` (what OpenCode keeps in its
``auth.json``): one JSON object in the data directory, ``{providerID: Auth}``, mode 0600, replaced
atomically (a temporary file renamed over it) so a reader never sees half a file.

The V2 integration routes see the same credentials, one per provider, each with an id and a label:
a key connected through them is stored with both (``connect``); a credential saved otherwise is
``cred_<providerID>``, labelled ``default``. OpenCode reads its auth file leniently, so the two
extra fields do not stop it from using a shared one.

The file is re-read when its modification time (or size) changes, so a key saved by this server,
by another process on the same data directory, or by hand is used from the next turn on without a
restart. Keys are never logged: errors name the file, never its content."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("opensession.credentials")

FILE_MODE = 0o600


class Credentials:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._cache: dict[str, dict[str, Any]] = {}

    @property
    def path(self) -> Path:
        return self._path

    def all(self) -> dict[str, dict[str, Any]]:
        """Every saved credential by provider id (a copy; the file as it is now)."""
        with self._lock:
            return {pid: dict(info) for pid, info in self._load().items()}

    def version(self) -> tuple[int, int] | None:
        """Changes whenever the file does (its modification time and size; None: no file), so a
        reader can keep what it derived from the credentials until then."""
        with self._lock:
            self._load()
            return self._stamp

    def get(self, provider_id: str) -> dict[str, Any] | None:
        with self._lock:
            info = self._load().get(provider_id)
            return dict(info) if info is not None else None

    def set(self, provider_id: str, info: Mapping[str, Any]) -> None:
        with self._lock:
            data = dict(self._load())
            data[provider_id] = dict(info)
            self._write(data)

    def remove(self, provider_id: str) -> None:
        """Forgets a provider's credential; removing one that is not saved is not an error (as
        OpenCode answers ``true`` for it too)."""
        with self._lock:
            data = dict(self._load())
            if data.pop(provider_id, None) is not None:
                self._write(data)

    def connect(self, provider_id: str, key: str, label: str, credential_id: str) -> None:
        """Save ``key`` as the provider's credential under a new id and label (replacing the
        one it had: a provider has one credential)."""
        self.set(provider_id, {"type": "api", "key": key, "id": credential_id, "label": label})

    def connection(self, provider_id: str) -> tuple[str, str] | None:
        """The provider's credential as a V2 connection: (id, label); None without one."""
        info = self.get(provider_id)
        return None if info is None else _connection(provider_id, info)

    def relabel(self, credential_id: str, label: str) -> str | None:
        """Rename a credential; the provider it belongs to, None when no credential has that id."""
        with self._lock:
            data = dict(self._load())
            provider_id = _owner(data, credential_id)
            if provider_id is not None:
                data[provider_id] = data[provider_id] | {"label": label}
                self._write(data)
            return provider_id

    def forget(self, credential_id: str) -> str | None:
        """Remove a credential by its id; the provider it belonged to, None when no credential
        has that id."""
        with self._lock:
            data = dict(self._load())
            provider_id = _owner(data, credential_id)
            if provider_id is not None:
                del data[provider_id]
                self._write(data)
            return provider_id

    def api_key(self, provider_id: str) -> str | None:
        """The saved API key of a provider (``{"type": "api"}`` credentials only)."""
        info = self.get(provider_id)
        if info and info.get("type") == "api" and isinstance(info.get("key"), str) and info["key"]:
            return str(info["key"])
        return None

    def key_for(self, provider_id: str, config_key: str | None, env_vars: Sequence[str] = ()) -> str | None:
        """The key a provider is called with, in OpenCode's order: ``provider.<id>.options.apiKey``
        in opencode.json, then the saved credential, then the provider's environment variables."""
        if config_key:
            return config_key
        stored = self.api_key(provider_id)
        if stored:
            return stored
        for name in env_vars:
            value = os.environ.get(name)
            if value:
                return value
        return None

    # -- the file -------------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            st = self._path.stat()
        except OSError:  # no file yet (or unreadable directory): no credentials
            self._stamp, self._cache = None, {}
            return self._cache
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self._cache
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot read credentials file %s (%s); using none", self._path, type(exc).__name__)
            data = {}
        if not isinstance(data, dict):
            data = {}
        self._cache = {pid: info for pid, info in data.items() if isinstance(info, dict)}
        self._stamp = stamp
        return self._cache

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        directory = self._path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".auth-", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, FILE_MODE)  # mkstemp creates 0600 already; say so explicitly
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._stamp = None  # re-read (and re-stamp) on the next access
        self._cache = data


DEFAULT_LABEL = "default"


def _connection(provider_id: str, info: Mapping[str, Any]) -> tuple[str, str]:
    credential_id, label = info.get("id"), info.get("label")
    return (
        credential_id if isinstance(credential_id, str) and credential_id else f"cred_{provider_id}",
        label if isinstance(label, str) and label else DEFAULT_LABEL,
    )


def _owner(data: Mapping[str, Mapping[str, Any]], credential_id: str) -> str | None:
    return next((pid for pid, info in data.items() if _connection(pid, info)[0] == credential_id), None)
