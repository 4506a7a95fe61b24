"""Watching a project directory, as OpenCode's file watcher does: a change to a file that is not
ignored is announced as ``file.watcher.updated {file, event: add|change|unlink}``, and a branch
switch (``.git/HEAD`` moved) as ``vcs.branch.updated {branch}``. Only git projects are watched,
from their first prompt on.

Changes arrive from ``watchfiles`` (inotify, debounced: a burst of writes is one batch) and are
filtered by the same rules the listings and searches use (``IgnoreRules``), so an ignored build
folder never floods the clients. Git's own files are never announced.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.runtime.workspace import _vcs
from app.runtime.workspace._ignore import IgnoreRules

log = logging.getLogger("opensession.watcher")

Publish = Callable[[str, dict[str, Any], str], None]  # (event type, properties, directory)

DEBOUNCE_MS = 150
KINDS = {1: "add", 2: "change", 3: "unlink"}  # watchfiles.Change values


class Watcher:
    def __init__(self, directory: Path, publish: Publish, extra_ignores: Callable[[], Sequence[str]]) -> None:
        self.directory = directory
        self.publish = publish
        self.extra_ignores = extra_ignores
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.branch: str | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"watcher:{self.directory}")

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        if not await _vcs.is_repository(self.directory):
            return  # as OpenCode: only a git project is watched (a home folder would be costly)
        # Imported on first use (start-up time is tracked), on a thread: loading its native
        # library on the loop stalled every request in flight at a project's first
        # prompt (the watcher starts with it).
        watchfiles = await asyncio.to_thread(importlib.import_module, "watchfiles")
        self.branch = await _vcs.branch(self.directory)
        try:
            async for batch in watchfiles.awatch(
                self.directory, watch_filter=None, debounce=DEBOUNCE_MS, step=50, stop_event=self.stop
            ):
                await self._announce(batch)
        except Exception:  # a vanished directory, an inotify limit: the server goes on without
            log.warning("stopped watching %s", self.directory, exc_info=True)

    async def _announce(self, batch: set[tuple[Any, str]]) -> None:
        rules: dict[str, IgnoreRules] = {}
        head_moved = False
        for change, raw in sorted(batch, key=lambda item: item[1]):
            path = Path(raw)
            try:
                rel = path.relative_to(self.directory).as_posix()
            except ValueError:
                continue
            if rel == ".git" or rel.startswith(".git/"):
                head_moved |= rel == ".git/HEAD"
                continue
            folder = rel.rpartition("/")[0]
            if folder not in rules:
                rules[folder] = IgnoreRules(self.directory, folder, self.extra_ignores())
            if rules[folder].ignored(rel, path.is_dir()):
                continue
            event = {"file": str(path), "event": KINDS.get(int(change), "change")}
            self.publish("file.watcher.updated", event, str(self.directory))
        if head_moved:
            branch = await _vcs.branch(self.directory)
            if branch != self.branch:
                self.branch = branch
                self.publish("vcs.branch.updated", {"branch": branch}, str(self.directory))
