"""Provider credentials saved with ``PUT /auth/{providerID}`` (what OpenCode keeps in its
``auth.json``): ``{providerID: Auth}``, read from memory on every turn, kept by a ``Keeper``:

- ``CredentialFile``, one process (the embedded default): a JSON object in the data directory,
  mode 0600, replaced atomically (a temporary file renamed over it) so a reader never sees half a
  file. It is re-read when its modification time (or size) changes, so a key saved by this
  server, by another process on the same data directory, or by hand is used from the next turn on
  without a restart;
- on a database several processes share, the database (``app.store.credentials``): a key saved
  through any process is every process's, whatever machine or data directory each has.

The V2 integration routes see the same credentials, one per provider, each with an id and a label:
a key connected through them is stored with both (``connect``); a credential saved otherwise is
``cred_<providerID>``, labelled ``default``. OpenCode reads its auth file leniently, so the two
extra fields do not stop it from using a shared one.

Keys are never logged: errors name the file, never its content."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("opensession.credentials")

FILE_MODE = 0o600

Saved = dict[str, dict[str, Any]]  # provider id -> its credential (OpenCode's ``Auth``)
# Changes the credentials as given, in place; True when it changed them (they are then stored).
Edit = Callable[[Saved], bool]


class Keeper(Protocol):
    """Where the saved credentials live."""

    def current(self) -> tuple[Hashable, Saved]:
        """A stamp that changes whenever the credentials do, and the credentials (not to be
        changed by the caller). Never waits on the network: called on every turn."""
        ...

    async def change(self, edit: Edit) -> None:
        """Run ``edit`` on the credentials as they are and store what it made of them, with no
        other change in between (on any process that shares them)."""
        ...

    async def refresh(self) -> None:
        """Bring ``current`` up to every change committed by now (another process's too)."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class CredentialFile:
    """The credentials in ``auth.json`` (one machine's processes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._cache: Saved = {}

    def current(self) -> tuple[Hashable, Saved]:
        with self._lock:
            return self._load(), self._cache

    async def change(self, edit: Edit) -> None:
        await asyncio.to_thread(self._change, edit)

    def _change(self, edit: Edit) -> None:
        with self._lock:
            self._load()
            data = dict(self._cache)
            if edit(data):
                self._write(data)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def refresh(self) -> None:
        pass  # ``current`` reads the file again whenever it changed

    def _load(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:  # no file yet (or unreadable directory): no credentials
            self._stamp, self._cache = None, {}
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return stamp
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot read credentials file %s (%s); using none", self.path, type(exc).__name__)
            data = {}
        if not isinstance(data, dict):
            data = {}
        self._cache = {pid: info for pid, info in data.items() if isinstance(info, dict)}
        self._stamp = stamp
        return stamp

    def _write(self, data: Saved) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".auth-", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, FILE_MODE)  # mkstemp creates 0600 already; say so explicitly
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._stamp = None  # re-read (and re-stamp) on the next access


class Credentials:
    """The saved credentials as the providers and the routes use them, whoever keeps them."""

    def __init__(self, keeper: Keeper) -> None:
        self.keeper = keeper

    def _saved(self) -> Saved:
        return self.keeper.current()[1]

    async def refresh(self) -> None:
        """Before a client is shown them: what another process changed an instant ago included
        (its notification may not have arrived yet)."""
        await self.keeper.refresh()

    def all(self) -> Saved:
        """Every saved credential by provider id (a copy)."""
        return {pid: dict(info) for pid, info in self._saved().items()}

    def version(self) -> Hashable:
        """Changes whenever the credentials do, so a reader can keep what it derived from them
        until then."""
        return self.keeper.current()[0]

    def get(self, provider_id: str) -> dict[str, Any] | None:
        info = self._saved().get(provider_id)
        return dict(info) if info is not None else None

    async def set(self, provider_id: str, info: Mapping[str, Any]) -> None:
        def edit(data: Saved) -> bool:
            data[provider_id] = dict(info)
            return True

        await self.keeper.change(edit)

    async def remove(self, provider_id: str) -> None:
        """Forgets a provider's credential; removing one that is not saved is not an error (as
        OpenCode answers ``true`` for it too)."""
        await self.keeper.change(lambda data: data.pop(provider_id, None) is not None)

    async def connect(self, provider_id: str, key: str, label: str, credential_id: str) -> None:
        """Save ``key`` as the provider's credential under a new id and label (replacing the
        one it had: a provider has one credential)."""
        await self.set(provider_id, {"type": "api", "key": key, "id": credential_id, "label": label})

    def connection(self, provider_id: str) -> tuple[str, str] | None:
        """The provider's credential as a V2 connection: (id, label); None without one."""
        info = self.get(provider_id)
        return None if info is None else _connection(provider_id, info)

    async def relabel(self, credential_id: str, label: str) -> str | None:
        """Rename a credential; the provider it belongs to, None when no credential has that id."""

        def rename(data: Saved, provider_id: str) -> None:
            data[provider_id] = data[provider_id] | {"label": label}

        return await self._on_owner(credential_id, rename)

    async def forget(self, credential_id: str) -> str | None:
        """Remove a credential by its id; the provider it belonged to, None when no credential
        has that id."""

        def drop(data: Saved, provider_id: str) -> None:
            del data[provider_id]

        return await self._on_owner(credential_id, drop)

    async def _on_owner(self, credential_id: str, change: Callable[[Saved, str], None]) -> str | None:
        owner: str | None = None

        def edit(data: Saved) -> bool:
            nonlocal owner
            owner = _owner(data, credential_id)
            if owner is not None:
                change(data, owner)
            return owner is not None

        await self.keeper.change(edit)
        return owner

    def api_key(self, provider_id: str) -> str | None:
        """The saved API key of a provider (``{"type": "api"}`` credentials only)."""
        info = self._saved().get(provider_id)
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


DEFAULT_LABEL = "default"


def _connection(provider_id: str, info: Mapping[str, Any]) -> tuple[str, str]:
    credential_id, label = info.get("id"), info.get("label")
    return (
        credential_id if isinstance(credential_id, str) and credential_id else f"cred_{provider_id}",
        label if isinstance(label, str) and label else DEFAULT_LABEL,
    )


def _owner(data: Mapping[str, Mapping[str, Any]], credential_id: str) -> str | None:
    return next((pid for pid, info in data.items() if _connection(pid, info)[0] == credential_id), None)
