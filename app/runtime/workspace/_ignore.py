"""Which listed entries are ignored: the same sources ripgrep reads (``.gitignore`` and
``.ignore`` in the root and every directory down to the listed one, ``.git/info/exclude``) plus
the project's ``watcher.ignore`` globs, so ``/file``'s ``ignored`` flag agrees with what the
searches skip. An entry inside an ignored directory is ignored too."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

IGNORE_FILES = (".gitignore", ".ignore")


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


class IgnoreRules:
    """Rules that apply inside one directory ``folder`` (relative to ``root``, '' for the root)."""

    def __init__(self, root: Path, folder: str, extra: Sequence[str]) -> None:
        # (the rules' base directory relative to root, its spec), outermost first
        from pathspec import GitIgnoreSpec  # on first use: start-up time is tracked

        self._specs: list[tuple[str, GitIgnoreSpec]] = []
        root_lines = _read(root / ".git" / "info" / "exclude") + list(extra)
        base = ""
        parts = [p for p in folder.split("/") if p]
        for depth in range(len(parts) + 1):
            base = "/".join(parts[:depth])
            lines = root_lines if depth == 0 else []
            for name in IGNORE_FILES:
                lines = lines + _read(root / base / name)
            if lines:
                self._specs.append((base, GitIgnoreSpec.from_lines(lines)))
        self._folder_ignored = any(self._matches("/".join(parts[:d]), True) for d in range(1, len(parts) + 1))

    def _matches(self, rel: str, is_dir: bool) -> bool:
        for base, spec in self._specs:
            if base and not rel.startswith(base + "/"):
                continue
            local = rel[len(base) + 1 :] if base else rel
            if spec.match_file(local + "/" if is_dir else local):
                return True
        return False

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """``rel`` is a direct child of the folder, relative to the root."""
        return self._folder_ignored or self._matches(rel, is_dir)
