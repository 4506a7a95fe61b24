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
import heapq
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

FRESH_S = 5.0


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class _Joined:
    """Strings joined by newlines, so a substring or pattern scan runs in C over all of them."""

    def __init__(self, items: list[str]) -> None:
        self.text = "\n".join(items)
        self.starts: list[int] = []
        offset = 0
        for item in items:
            self.starts.append(offset)
            offset += len(item) + 1

    def _index(self, at: int) -> int:
        return bisect.bisect_right(self.starts, at) - 1

    def containing(self, needle: str) -> list[int]:
        """Indexes of the items containing ``needle``, each once."""
        hits: list[int] = []
        at = self.text.find(needle)
        while at != -1:
            index = self._index(at)
            hits.append(index)
            following = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.text)
            at = self.text.find(needle, following)
        return hits

    def subsequence(self, needle: str) -> list[int]:
        """Indexes of the items holding ``needle``'s characters in order. Each step skips to the
        next wanted character possessively (no backtracking), within one item."""
        first, rest = re.escape(needle[0]), needle[1:]
        steps = first + "".join(f"[^{re.escape(c)}\n]*+{re.escape(c)}" for c in rest)
        found: list[int] = []
        for match in re.finditer(steps, self.text):
            index = self._index(match.start())
            if not found or found[-1] != index:
                found.append(index)
        return found


@dataclass
class _Column:
    """Paths of one kind, with what the ranking reads precomputed once per build."""

    paths: list[str]
    lowered: list[str] = field(init=False)
    names: list[str] = field(init=False)
    joined_paths: _Joined = field(init=False)
    joined_names: _Joined = field(init=False)

    def __post_init__(self) -> None:
        self.lowered = [p.lower() for p in self.paths]
        self.names = [_name(p) for p in self.lowered]
        self.joined_paths = _Joined(self.lowered)
        self.joined_names = _Joined(self.names)

    def rank(self, needle: str, limit: int) -> list[tuple[tuple[int, float, int, str], str]]:
        """This column's best ``limit`` candidates with their sort keys. Name matches come first,
        so the path scan and the fuzzy pass run only while fewer than ``limit`` are found."""
        ranked: list[tuple[tuple[int, float, int, str], str]] = []
        seen: set[int] = set()

        def add(indexes: list[int], tier: Callable[[int], int], score: Callable[[int], float]) -> None:
            fresh = [i for i in indexes if i not in seen]
            best = heapq.nsmallest(limit, fresh, key=lambda i: (tier(i), score(i), len(self.paths[i]), self.lowered[i]))
            seen.update(fresh)
            ranked.extend(((tier(i), score(i), len(self.paths[i]), self.lowered[i]), self.paths[i]) for i in best)

        def name_tier(i: int) -> int:
            name = self.names[i]
            return 0 if name == needle else 1 if name.startswith(needle) else 2

        add(self.joined_names.containing(needle), name_tier, lambda i: 0.0)
        if len(ranked) < limit:
            add(self.joined_paths.containing(needle), lambda i: 3, lambda i: 0.0)
        if len(ranked) < limit:
            last = needle.rstrip("/").rsplit("/", 1)[-1] or needle
            joined = self.joined_paths if "/" in needle else self.joined_names
            candidates = [i for i in joined.subsequence(needle) if i not in seen]
            if candidates:
                from rapidfuzz import fuzz, process  # on first use: start-up time is tracked

                scored = process.extract(
                    last, [self.names[i] for i in candidates], scorer=fuzz.partial_ratio, limit=limit
                )
                scores = {candidates[at]: score for _, score, at in scored}
                add(list(scores), lambda i: 4, lambda i: -scores[i])
        return ranked


@dataclass
class FileIndex:
    files: _Column
    dirs: _Column
    built: float
    _shallow: dict[str, list[str]] = field(default_factory=dict)  # empty-query answers, per kind

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
            if kind not in self._shallow:
                every = [p for c in columns for p in c.paths]
                self._shallow[kind] = heapq.nsmallest(200, every, key=lambda p: (p.rstrip("/").count("/"), p.lower()))
            return self._shallow[kind][:limit]
        ranked = [pair for column in columns for pair in column.rank(needle, limit)]
        ranked.sort()
        return [path for _, path in ranked[:limit]]


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
