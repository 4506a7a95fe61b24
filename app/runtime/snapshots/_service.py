"""Snapshots per session directory, on where OpenCode has them: inside a git repository, unless
opencode.json says ``"snapshot": false``. The shadow repositories are in the data directory (as
OpenCode's) or, where other processes may need them (a cluster), beside the project in its git
directory. Outside a repository there are no snapshots (the
reference server's rule: its ``vcs`` must be git), so steps carry none and a revert moves only
messages.

Each operation runs whole in one worker thread (one hop, however many git commands it takes),
one at a time per shadow repository. It is never abandoned halfway: a cancelled caller still
waits for it, since a killed ``git add`` would leave ``index.lock`` behind.

A snapshot failure never fails a turn: the operation logs a warning and answers "no snapshot".
What moves files is the exception: a restore (and its ``check``) that cannot be done as asked
raises RevertFailed, so a revert never reports success for files it did not put back. A missing
``git`` executable switches snapshots off for the process, with one warning.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.config import ConfigLoader
from app.runtime.errors import RevertFailed
from app.runtime.snapshots._git import GitMissing, git
from app.runtime.snapshots._repository import ShadowRepository, SnapshotError, unbounded

log = logging.getLogger("opensession.snapshots")

DIFF_CACHE_SIZE = 64


class FileSnapshots:
    def __init__(self, data_dir: Path, config: ConfigLoader, *, beside_project: bool = False) -> None:
        self.root = data_dir / "snapshot"
        self.beside_project = beside_project
        self.config = config
        self._repositories: dict[str, ShadowRepository | None] = {}
        self._resolving: dict[str, asyncio.Lock] = {}
        self._locks: dict[Path, asyncio.Lock] = {}
        self._git_missing = False
        # Trees never change, so the diff between two of them never does: a prompt's diff and the
        # session's are often the same pair, and clients ask again for what a step announced.
        self._diffs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}

    def enabled(self, directory: str) -> bool:
        return not self._git_missing and self.config.load(directory).snapshot

    async def _repository(self, directory: str) -> ShadowRepository | None:
        if not self.enabled(directory):
            return None
        if directory in self._repositories:
            return self._repositories[directory]
        async with self._resolving.setdefault(directory, asyncio.Lock()):
            if directory not in self._repositories:
                self._repositories[directory] = await asyncio.to_thread(self._open, directory)
        return self._repositories[directory]

    def _open(self, directory: str) -> ShadowRepository | None:
        found = git("rev-parse", "--show-toplevel", cwd=directory)
        if found.code != 0:
            return None  # not inside a git repository
        worktree = Path(found.text.strip())
        return ShadowRepository(self._gitdir(directory, worktree), worktree, Path(directory))

    def _gitdir(self, directory: str, worktree: Path) -> Path:
        """The shadow repository of ``worktree``: in the data directory, keyed by its path; or
        beside the project, inside the work tree's own git directory (``.git``, or a linked
        worktree's ``.git/worktrees/<name>``), which moves and is shared with the project and
        names it alike on every machine whatever the mount point."""
        if self.beside_project:
            found = git("rev-parse", "--absolute-git-dir", cwd=directory)
            if found.code == 0:
                return Path(found.text.strip()) / "opensession" / "snapshot"
            log.warning("no git directory found for %s: its snapshots stay in this process's data directory", worktree)
        return self.root / hashlib.sha256(str(worktree).encode()).hexdigest()[:20]

    async def _call(self, directory: str, action: Callable[[ShadowRepository], Any]) -> tuple[bool, Any]:
        """``action(repository)`` in a worker thread, one at a time per repository, never
        abandoned halfway; ``(False, None)`` where snapshots are off. Raises what it raises."""
        repository = await self._repository(directory)
        if repository is None:
            return False, None
        async with self._locks.setdefault(repository.gitdir, asyncio.Lock()):
            work = asyncio.ensure_future(asyncio.to_thread(action, repository))
            try:
                return True, await asyncio.shield(work)
            except asyncio.CancelledError:
                await work
                raise

    def _switch_off(self, exc: GitMissing) -> None:
        if not self._git_missing:
            log.warning("git is not usable (%s): file snapshots are off, undo will not restore files", exc)
        self._git_missing = True

    async def _run(
        self, directory: str, operation: str, default: Any, action: Callable[[ShadowRepository], Any]
    ) -> Any:
        """``_call`` under the policies of the module docstring: a failure answers ``default``."""
        try:
            ran, result = await self._call(directory, action)
            return result if ran else default
        except GitMissing as exc:
            self._switch_off(exc)
        except (SnapshotError, OSError) as exc:
            log.warning("snapshot %s failed in %s: %s", operation, directory, exc)
        return default

    async def _strict(self, directory: str, action: Callable[[ShadowRepository], None]) -> bool:
        """``_call`` for what moves files (or checks they may be moved): any failure but a
        missing git is RevertFailed. False where snapshots are off (nothing moves)."""
        try:
            ran, _ = await self._call(directory, action)
            return ran
        except GitMissing as exc:
            self._switch_off(exc)
            return False
        except (SnapshotError, OSError) as exc:
            raise RevertFailed(f"Cannot revert the files in {directory}: {exc}") from exc

    async def track(self, directory: str) -> str | None:
        """Record the directory now; None where snapshots are off."""
        result: str | None = await self._run(directory, "track", None, lambda repo: repo.track())
        return result

    async def changed(self, directory: str, before: str, after: str) -> list[str]:
        """Absolute paths of the files that differ between two snapshots. Read off their diff
        (cached), which the prompt's and the session's diffs then often reuse."""
        diffs = await self.diff(directory, before, after)
        repository = self._repositories.get(directory)
        if not diffs or repository is None:
            return []
        return [str(repository.worktree / d["file"]) for d in diffs]

    async def diff(self, directory: str, before: str, after: str) -> list[dict[str, Any]]:
        key = (directory, before, after)
        cached = self._diffs.get(key)
        if cached is None:
            cached = await self._run(directory, "diff", None, lambda repo: repo.diff(before, after))
            if cached is None:
                return []
            if len(self._diffs) >= DIFF_CACHE_SIZE:
                self._diffs.pop(next(iter(self._diffs)))
            self._diffs[key] = cached
        return [dict(d) for d in cached]

    async def changed_since(self, directory: str, snapshot: str) -> list[str]:
        """The files that differ between ``snapshot`` and the directory now."""
        now = await self.track(directory)
        return await self.changed(directory, snapshot, now) if now else []

    async def patch_text(self, directory: str, before: str, after: str) -> str:
        result: str = await self._run(directory, "patch", "", lambda repo: repo.patch_text(before, after))
        return result

    async def check(self, directory: str, changes: Mapping[str, str]) -> bool:
        """Whether ``restore(directory, changes)`` will move files (False where snapshots are
        off); RevertFailed when it would be refused (see ShadowRepository.check)."""
        return await self._strict(directory, lambda repo: repo.check(changes))

    async def restore(
        self, directory: str, changes: Mapping[str, str], time_left: Callable[[], float] = unbounded
    ) -> None:
        """Put each file of ``changes`` (absolute path -> snapshot) back as that snapshot had it
        (see ShadowRepository.restore); RevertFailed when refused or when git fails; OutOfTime
        when ``time_left`` (asked before each step that moves files) runs out first."""
        if changes:
            await self._strict(directory, lambda repo: repo.restore(changes, time_left))
