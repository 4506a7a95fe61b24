"""The language servers of each instance directory: OpenCode 1.18's ``LSP`` service.

A server starts the first time a file it serves is touched, one client per server and root;
one that cannot be found, started or initialized is marked broken for that root (logged once)
and skipped until the directory is disposed. The clients of a directory end with it
(``dispose``), when its ``lsp`` configuration changes, and with the server (``stop``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

from app.config import ConfigLoader
from app.runtime.lsp._client import ClientFailed, Diagnostic, LspClient
from app.runtime.lsp._servers import Context, ServerSpec, configured

log = logging.getLogger("opensession.lsp")

LSP_UPDATED = "lsp.updated"
_TRUE = frozenset({"1", "true", "yes", "on", "y"})

Publish = Callable[[str, dict[str, Any], str], None]  # (event type, properties, directory)


class LspStatus(TypedDict):
    """``GET /lsp``'s entries (OpenCode's ``LSPStatus``)."""

    id: str
    name: str
    root: str
    status: str


@dataclass
class _Instance:
    key: str
    servers: list[ServerSpec]
    directory: Path  # the instance directory, symlinks resolved (as the tools' paths are)
    clients: list[LspClient] = field(default_factory=list)
    broken: set[tuple[str, Path]] = field(default_factory=set)
    spawning: dict[tuple[str, Path], asyncio.Future[LspClient | None]] = field(default_factory=dict)


def _forget(instance: _Instance, key: tuple[str, Path], _done: asyncio.Future[LspClient | None]) -> None:
    instance.spawning.pop(key, None)


def _flag(env: dict[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


class LanguageServers:
    def __init__(self, config: ConfigLoader, publish: Publish, env: dict[str, str] | None = None) -> None:
        self._config = config
        self._publish = publish
        self._env = dict(os.environ if env is None else env)
        self._instances: dict[str, _Instance] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def enabled(self, directory: str) -> bool:
        """Whether ``lsp`` is on for ``directory`` (cheap: the configuration is cached)."""
        return self._config.load(directory).lsp is not False

    def _instance(self, directory: str) -> _Instance:
        section = self._config.load(directory).lsp
        key = json.dumps(section, sort_keys=True, default=str)
        current = self._instances.get(directory)
        if current is not None and current.key == key:
            return current
        if current is not None:  # the configuration changed: its servers go
            self._close(current)
        servers = configured(section, _flag(self._env, "OPENCODE_EXPERIMENTAL_LSP_TY"))
        current = self._instances[directory] = _Instance(key, servers, Path(directory).resolve())
        return current

    # -- clients ---------------------------------------------------------------------------------

    async def _clients(self, directory: str, path: Path) -> list[LspClient]:
        """The clients serving ``path``, started as needed (``lsp.updated`` per new one)."""
        if not self.enabled(directory):
            return []
        instance = self._instance(directory)
        root_dir = instance.directory
        if not _inside(path, root_dir):
            return []
        found: list[LspClient] = []
        for spec in instance.servers:
            if not spec.serves(path):
                continue
            root = spec.root(path, root_dir)
            if root is None or (spec.id, root) in instance.broken:
                continue
            client = next((c for c in instance.clients if c.server_id == spec.id and c.root == root), None)
            if client is None:
                pending = instance.spawning.get((spec.id, root))
                if pending is None:
                    pending = asyncio.ensure_future(self._spawn(instance, spec, root, directory))
                    instance.spawning[(spec.id, root)] = pending
                    pending.add_done_callback(partial(_forget, instance, (spec.id, root)))
                client = await asyncio.shield(pending)
            if client is not None:
                found.append(client)
        return found

    async def _spawn(self, instance: _Instance, spec: ServerSpec, root: Path, directory: str) -> LspClient | None:
        context = Context(
            instance.directory,
            self._env,
            download=not _flag(self._env, "OPENCODE_DISABLE_LSP_DOWNLOAD"),
            experimental_ty=_flag(self._env, "OPENCODE_EXPERIMENTAL_LSP_TY"),
        )
        started = time.monotonic()
        try:
            launch = await asyncio.to_thread(spec.spawn, root, context)
        except Exception as exc:  # a broken spec must not fail the tool
            log.warning("language server %s cannot be found for %s: %s", spec.id, root, exc)
            launch = None
        if launch is None:
            log.info("language server %s is not available for %s", spec.id, root)
            instance.broken.add((spec.id, root))
            return None
        client = LspClient(spec.id, root, launch)
        try:
            await client.start(self._env)
        except ClientFailed as exc:
            log.warning("language server %s failed to start for %s: %s", spec.id, root, exc)
            instance.broken.add((spec.id, root))
            return None
        if self._instances.get(directory) is not instance:  # disposed meanwhile
            await client.shutdown()
            return None
        client.on_exit = lambda gone: self._gone(instance, gone)
        instance.clients.append(client)
        log.info("language server %s started for %s in %.1f s", spec.id, root, time.monotonic() - started)
        self._publish(LSP_UPDATED, {}, directory)
        return client

    def _gone(self, instance: _Instance, client: LspClient) -> None:
        """A server that exited by itself is dropped and not started again for that root."""
        if client in instance.clients:
            instance.clients.remove(client)
            instance.broken.add((client.server_id, client.root))

    # -- what the tools call ---------------------------------------------------------------------

    async def touch(self, directory: str, path: Path, wait: bool) -> None:
        """Tell the servers of ``path`` its current text (starting them as needed); with
        ``wait``, until each has its diagnostics (bounded). Never raises."""
        try:
            clients = await self._clients(directory, path)
            if not clients:
                return
            text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            log.warning("cannot touch %s for its language servers: %s", path, exc)
            return
        after = time.monotonic()
        versions = [(client, client.open(path, text)) for client in clients if client.alive]
        if wait:
            await asyncio.gather(
                *(client.wait_for_document(path, version, after) for client, version in versions),
                return_exceptions=True,
            )

    def warm(self, directory: str, path: Path) -> None:
        """Start the servers of ``path`` and open it, without waiting (the read tool)."""
        if not self.enabled(directory):
            return
        task = asyncio.get_running_loop().create_task(self.touch(directory, path, wait=False))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def diagnostics(self, directory: str) -> dict[str, list[Diagnostic]]:
        """Every file's diagnostics from every client of ``directory`` (client by client, files
        in the order first seen)."""
        instance = self._instances.get(directory)
        merged: dict[str, list[Diagnostic]] = {}
        for client in instance.clients if instance is not None else []:
            for file, items in client.diagnostics.items():
                merged.setdefault(file, []).extend(items)
        return merged

    def running(self) -> int:
        """Language server processes of this process, every directory together (the metrics)."""
        return sum(len(instance.clients) for instance in self._instances.values())

    def status(self, directory: str) -> list[LspStatus]:
        """``GET /lsp``: the connected clients, roots relative to ``directory``."""
        instance = self._instances.get(directory)
        if instance is None or not self.enabled(directory):
            return []
        return [
            {
                "id": c.server_id,
                "name": c.server_id,
                "root": os.path.relpath(c.root, instance.directory) if c.root != instance.directory else "",
                "status": "connected",
            }
            for c in instance.clients
        ]

    async def has_clients(self, directory: str, path: Path) -> bool:
        """Whether some server would serve ``path`` (the lsp tool's check)."""
        if not self.enabled(directory):
            return False
        instance = self._instance(directory)
        for spec in instance.servers:
            if spec.serves(path):
                root = spec.root(path, instance.directory)
                if root is not None and (spec.id, root) not in instance.broken:
                    return True
        return False

    async def request(self, directory: str, path: Path, method: str, params: dict[str, Any]) -> list[Any]:
        """``method`` sent to each client of ``path``; their answers (None for a failure)."""
        clients = await self._clients(directory, path)
        return list(await asyncio.gather(*(c.request(method, params) for c in clients)))

    # -- ending ----------------------------------------------------------------------------------

    def _close(self, instance: _Instance) -> None:
        for pending in instance.spawning.values():
            pending.cancel()
        clients, instance.clients = instance.clients, []
        for client in clients:
            task = asyncio.get_running_loop().create_task(client.shutdown())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def dispose(self, directory: str) -> None:
        """End ``directory``'s servers (``POST /instance/dispose``); the next touch starts anew."""
        instance = self._instances.pop(directory, None)
        if instance is not None:
            self._close(instance)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        for directory in list(self._instances):
            self.dispose(directory)
        await asyncio.gather(*self._background, *self._closing, return_exceptions=True)
