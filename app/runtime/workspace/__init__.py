"""The workspace: the project's files as clients and tools see them. Listing and reading (confined
to the project directory), finding files by name and text by pattern (ripgrep), and version
control status and patches (git); watching project directories for changes (the
``file.watcher.updated`` and ``vcs.branch.updated`` events).

May import: the runtime kernel (``errors``) and ``app.config``. A leaf engine: the routers and the
``tools`` domain use it, it uses no other domain.

Invariants: nothing outside the instance directory is read (paths are resolved, symlinks
followed, before any access; listings skip symlinks; ripgrep never follows them); every search
and listing ignores the same things (``.gitignore`` in or outside a git repository, ``.ignore``,
``.git/info/exclude``, and the project's ``watcher.ignore`` globs), so the tools and the routes
agree on what exists; the system's refusal of a client's path or directory (too long, a symlink
loop, unreadable) is that client's 4xx error, never the server's (``_paths.refusals``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.config import ConfigError, ConfigLoader
from app.jsonutil import readable
from app.runtime.workspace import _files, _find, _ripgrep, _vcs
from app.runtime.workspace._paths import confine, real, refusals
from app.runtime.workspace._ripgrep import Match
from app.runtime.workspace._vcs import run as run_git
from app.runtime.workspace._watcher import Publish, Watcher

__all__ = ["Match", "Workspace", "confine", "real", "refusals", "run_git"]

FIND_TEXT_LIMIT = 10  # OpenCode's /find answers at most ten matches
FIND_FILES_LIMIT = 10


class Workspace:
    """The facade routers and tools use; one per runtime. ``config`` supplies ``watcher.ignore``."""

    def __init__(self, config: ConfigLoader | None = None, publish: Publish | None = None) -> None:
        self._config = config or ConfigLoader()
        self._indexes = _find.IndexCache()
        self._publish = publish
        self._watchers: dict[str, Watcher] = {}

    def watch(self, directory: str) -> None:
        """Start announcing the changes under ``directory`` (once per directory; idempotent)."""
        if self._publish is None or directory in self._watchers:
            return
        try:
            if not Path(directory).is_dir():
                return
        except OSError:  # a name too long for the file system, say: nothing there to watch
            return
        watcher = Watcher(Path(directory).resolve(), self._publish, lambda: self.ignore_patterns(directory))
        self._watchers[directory] = watcher
        watcher.start()

    async def unwatch(self, directory: str) -> None:
        """Stop announcing the changes under ``directory`` (it is going away: a removed worktree)."""
        watcher = self._watchers.pop(directory, None)
        if watcher is not None:
            await watcher.close()
        self.forget(directory)

    def ignore_patterns(self, directory: str) -> list[str]:
        """The project's ``watcher.ignore`` globs (none when its configuration cannot be read:
        that error is reported by the routes that need the configuration)."""
        try:
            return list(self._config.load(directory).watcher_ignore)
        except ConfigError:
            return []

    def _exclusions(self, directory: str) -> list[str]:
        return _ripgrep.exclusions(self.ignore_patterns(directory))

    # -- files --------------------------------------------------------------------------------

    async def listing(self, directory: str, path: str) -> list[_files.Entry]:
        """The direct children of ``path`` (relative to the project, or absolute inside it)."""
        with refusals(path):
            root = real(Path(directory))
            folder = confine(root, path)
            return await asyncio.to_thread(_files.list_directory, root, folder, path, self.ignore_patterns(directory))

    async def read(self, directory: str, path: str) -> dict[str, Any]:
        """OpenCode's ``FileContent`` of one file."""
        with refusals(path):
            target = confine(real(Path(directory)), path)
            return await asyncio.to_thread(_files.read_content, target, path)

    async def file(self, directory: str, path: str) -> tuple[Path, str]:
        """The real path of a regular file of the project and its MIME type (to serve as is)."""
        with refusals(path):
            target = confine(real(Path(directory)), path)
            return await asyncio.to_thread(_files.regular_file, target, path), _files.mime_type(target)

    # -- search -------------------------------------------------------------------------------

    async def find_text(self, directory: str, pattern: str, limit: int = FIND_TEXT_LIMIT) -> list[Match]:
        """Lines matching the regular expression ``pattern`` anywhere in the project."""
        with refusals(directory):
            root = real(Path(directory))
            found, _ = await _ripgrep.search(root, pattern, limit=limit, globs=self._exclusions(directory))
        return found

    async def find_files(
        self, directory: str, query: str, kind: str = "all", limit: int = FIND_FILES_LIMIT
    ) -> list[str]:
        """Files and directories (``kind``: file, directory or all) ranked by how well their names
        match ``query``; directories end with ``/``."""
        with refusals(directory):
            root = real(Path(directory))
            globs = self._exclusions(directory)
            index = await self._indexes.get((str(root), *globs), lambda: _ripgrep.files(root, globs))
        return readable(await asyncio.to_thread(index.search, query, kind, limit))

    def forget(self, directory: str) -> None:
        """Something changed under ``directory``: the next name lookup re-reads the tree."""
        self._indexes.forget(str(Path(directory).resolve()))

    async def files(self, directory: str, folder: Path, globs: list[str] | None = None) -> list[Path]:
        """Every file under ``folder`` not ignored, in rg's order. ``globs`` (gitignore syntax, e.g.
        ``**/*.py`` or ``!dist/``) narrow the list; the project's exclusions come last, so they win."""
        wanted = [f"--glob={g}" for g in globs or []]
        names = await _ripgrep.files(folder, [*wanted, *self._exclusions(directory)])
        return [folder / name for name in names]

    async def grep(
        self, directory: str, folder: Path, pattern: str, *, include: str | None = None, limit: int
    ) -> tuple[list[tuple[Path, Match]], bool]:
        """Lines matching ``pattern`` under ``folder`` (or in the file ``folder``), at most ``limit``
        of them, and whether more were cut off."""
        base, target = (folder, ".") if folder.is_dir() else (folder.parent, folder.name)
        globs = ([f"--glob={include}"] if include else []) + self._exclusions(directory)
        found, more = await _ripgrep.search(base, pattern, limit=limit, globs=globs, target=target)
        return [(base / m.path, m) for m in found], more

    # -- version control ----------------------------------------------------------------------

    async def vcs(self, directory: str) -> dict[str, Any]:
        return await _vcs.info(Path(directory))

    async def status(self, directory: str) -> list[dict[str, Any]]:
        """OpenCode's ``VcsFileStatus[]``: changed files against HEAD, untracked included."""
        return [c.wire() for c in await _vcs.changes(Path(directory))]

    async def diff(self, directory: str, mode: str, context: int = 3) -> list[dict[str, Any]]:
        """OpenCode's ``VcsFileDiff[]`` against HEAD (``git``) or the default branch (``branch``)."""
        found = await _vcs.patches(Path(directory), mode, context)
        return [
            {
                "file": readable(c.file),
                "patch": p,
                "additions": c.additions,
                "deletions": c.deletions,
                "status": c.status,
            }
            for c, p in found
        ]

    async def raw_diff(self, directory: str) -> str:
        return await _vcs.raw(Path(directory))

    async def apply_patch(self, directory: str, patch: str) -> None:
        """Apply a patch like ``raw_diff``'s to the working tree; ``PatchNotApplied`` otherwise."""
        await _vcs.apply(Path(directory), patch)

    async def close(self) -> None:
        await asyncio.gather(*(w.close() for w in self._watchers.values()))
        await self._indexes.close()
