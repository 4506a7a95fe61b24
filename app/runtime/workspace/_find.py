"""Finding files and directories by name: a cached index of the project's paths and a ranking.

The index is ripgrep's file list (so it ignores what rg ignores) plus every directory holding one
of those files (written with a trailing ``/``), kept per (directory, exclusions). It is built on
first use; later uses get it at once, and one older than ``FRESH_S`` is rebuilt in the background
meanwhile (stale-while-revalidate, one rebuild at a time), so a lookup never waits on a walk of a
big tree after the first.

Ranking, best first: the name equals the query, the name starts with it, the name contains it, the
path contains it (all case-insensitive), then fuzzy matches (the query's characters in order)
scored by rapidfuzz on the name. Ties go to shorter, then alphabetically earlier paths. An empty
query lists the shallowest entries first.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rapidfuzz import fuzz, process

FRESH_S = 5.0
FUZZY_CUTOFF = 50.0


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class _Column:
    """Paths of one kind, with what the ranking reads precomputed once per build."""

    paths: list[str]
    lowered: list[str] = field(init=False)
    names: list[str] = field(init=False)
    haystack: str = field(init=False)
    starts: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.lowered = [p.lower() for p in self.paths]
        self.names = [_name(p) for p in self.lowered]
        self.haystack = "\n".join(self.lowered)
        self.starts, offset = [], 0
        for path in self.lowered:
            self.starts.append(offset)
            offset += len(path) + 1

    def containing(self, query: str) -> list[int]:
        """Indexes of the paths containing ``query`` (one scan of the joined paths, in C)."""
        hits: list[int] = []
        at = self.haystack.find(query)
        while at != -1:
            index = bisect.bisect_right(self.starts, at) - 1
            hits.append(index)
            following = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.haystack)
            at = self.haystack.find(query, following)
        return hits

    def fuzzy(self, query: str, limit: int) -> list[tuple[int, float]]:
        """Indexes of paths holding the query's characters in order, best names first."""
        pattern = re.compile("[^\n]*?".join(re.escape(c) for c in query))
        hits: set[int] = set()
        for match in pattern.finditer(self.haystack):
            hits.add(bisect.bisect_right(self.starts, match.start()) - 1)
        if not hits:
            return []
        chosen = sorted(hits)
        scored = process.extract(
            query, [self.names[i] for i in chosen], scorer=fuzz.partial_ratio, limit=limit, score_cutoff=0
        )
        return [(chosen[i], score) for _, score, i in scored]


@dataclass
class FileIndex:
    files: _Column
    dirs: _Column
    built: float

    @classmethod
    def from_files(cls, files: list[str]) -> FileIndex:
        dirs: set[str] = set()
        for path in files:
            cut = path.rfind("/")
            while cut > 0:
                folder = path[: cut + 1]
                if folder in dirs:
                    break
                dirs.add(folder)
                cut = path.rfind("/", 0, cut)
        return cls(_Column(files), _Column(sorted(dirs)), time.monotonic())

    def search(self, query: str, kind: str, limit: int) -> list[str]:
        """Up to ``limit`` paths of ``kind`` ("file", "directory" or "all"), best first."""
        columns = [c for k, c in (("directory", self.dirs), ("file", self.files)) if kind in (k, "all")]
        needle = query.strip().replace("\\", "/").lower()
        if not needle:
            shallow = [p for c in columns for p in c.paths]
            return sorted(shallow, key=lambda p: (p.rstrip("/").count("/"), p.lower()))[:limit]
        ranked: list[tuple[tuple[int, float, int, str], str]] = []
        for column in columns:
            ranked += self._rank(column, needle, limit)
        ranked.sort()
        return [path for _, path in ranked[:limit]]

    @staticmethod
    def _rank(column: _Column, needle: str, limit: int) -> list[tuple[tuple[int, float, int, str], str]]:
        ranked = []
        seen: set[int] = set()
        for i in column.containing(needle):
            name = column.names[i]
            tier = 0 if name == needle else 1 if name.startswith(needle) else 2 if needle in name else 3
            ranked.append(((tier, 0.0, len(column.paths[i]), column.lowered[i]), column.paths[i]))
            seen.add(i)
        if len(ranked) < limit:
            for i, score in column.fuzzy(needle, limit + len(seen)):
                if i not in seen:
                    ranked.append(((4, -score, len(column.paths[i]), column.lowered[i]), column.paths[i]))
        return ranked


def _consume(task: asyncio.Task[FileIndex]) -> None:
    """A background rebuild's failure is reported to whoever awaits it, or dropped (the stale
    index stays in use and the next stale lookup tries again)."""
    if not task.cancelled():
        task.exception()


class IndexCache:
    """One ``FileIndex`` per key, refreshed in the background once stale."""

    def __init__(self, fresh_s: float = FRESH_S) -> None:
        self._fresh_s = fresh_s
        self._indexes: dict[tuple[str, ...], FileIndex] = {}
        self._building: dict[tuple[str, ...], asyncio.Task[FileIndex]] = {}

    async def get(self, key: tuple[str, ...], list_files: Callable[[], Awaitable[list[str]]]) -> FileIndex:
        index = self._indexes.get(key)
        if index is not None and time.monotonic() - index.built < self._fresh_s:
            return index
        task = self._building.get(key)
        if task is None:
            task = asyncio.create_task(self._build(key, list_files), name=f"workspace:index:{key[0]}")
            task.add_done_callback(_consume)
            self._building[key] = task
        if index is not None:
            return index  # stale: served while the rebuild runs
        return await asyncio.shield(task)

    async def _build(self, key: tuple[str, ...], list_files: Callable[[], Awaitable[list[str]]]) -> FileIndex:
        try:
            files = await list_files()
            index = await asyncio.to_thread(FileIndex.from_files, files)
            self._indexes[key] = index
            return index
        finally:
            self._building.pop(key, None)

    def forget(self, directory: str) -> None:
        """Drop the indexes of ``directory`` (the next lookup rebuilds them)."""
        for key in [k for k in self._indexes if k[0] == directory]:
            del self._indexes[key]

    async def close(self) -> None:
        tasks = list(self._building.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
