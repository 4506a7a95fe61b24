"""One file's change as OpenCode's clients show it (``SnapshotFileDiff``): a unified patch with
the whole file as context, headed ``Index:`` like the reference server's, and its line counts.
The hunk body is git's (``git diff -U<huge>`` gives one hunk spanning the file); only the headers
are OpenCode's."""

from __future__ import annotations

from typing import Any

RULE = "=" * 67
STATUS = {"A": "added", "D": "deleted"}  # anything else (M, T) is a modification


def file_diff(name: str, code: str, body: list[str]) -> dict[str, Any]:
    """The SnapshotFileDiff of ``name`` from git's status letter and hunk lines (`` ``, ``-``,
    ``+`` and ``\\ No newline at end of file``)."""
    additions = sum(1 for line in body if line.startswith("+"))
    deletions = sum(1 for line in body if line.startswith("-"))
    context = sum(1 for line in body if line.startswith(" "))
    old, new = context + deletions, context + additions
    head = [f"Index: {name}", RULE, f"--- {name}\t", f"+++ {name}\t"]
    if body:
        head.append(f"@@ -{1 if old else 0},{old} +{1 if new else 0},{new} @@")
    return {
        "file": name,
        "patch": "\n".join(head + body) + "\n",
        "additions": additions,
        "deletions": deletions,
        "status": STATUS.get(code, "modified"),
    }


def split_patches(text: str) -> list[list[str]]:
    """The hunk lines of each file in ``git diff -p`` output, in order (empty for a binary file
    or a mode change)."""
    files: list[list[str]] = []
    body: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            files.append([])
            body = None
        elif line.startswith("@@ ") and files and body is None:
            body = files[-1]
        elif body is not None and line[:1] in (" ", "+", "-", "\\"):
            body.append(line)
    return files
