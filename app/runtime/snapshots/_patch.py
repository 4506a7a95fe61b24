"""One file's change as OpenCode's clients show it (``SnapshotFileDiff``): a unified patch with
the whole file as context, headed ``Index:`` like the reference server's, and its line counts."""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any

RULE = "=" * 67
NO_NEWLINE = "\\ No newline at end of file"


def _lines(text: str) -> list[str]:
    """Lines with their endings: ``"b"`` and ``"b\\n"`` differ, as a final newline does."""
    return text.splitlines(keepends=True) if text else []


def _emit(out: list[str], sign: str, line: str) -> None:
    out.append(sign + line.rstrip("\n"))
    if not line.endswith("\n"):
        out.append(NO_NEWLINE)


def file_diff(name: str, before: str | None, after: str | None) -> dict[str, Any]:
    """The SnapshotFileDiff of ``name`` from ``before`` to ``after`` (None: the file is absent)."""
    old, new = _lines(before or ""), _lines(after or "")
    body: list[str] = []
    additions = deletions = 0
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            for line in old[i1:i2]:
                _emit(body, " ", line)
            continue
        for line in old[i1:i2]:
            _emit(body, "-", line)
        for line in new[j1:j2]:
            _emit(body, "+", line)
        deletions += i2 - i1
        additions += j2 - j1
    head = [f"Index: {name}", RULE, f"--- {name}\t", f"+++ {name}\t"]
    if body:
        head.append(f"@@ -{1 if old else 0},{len(old)} +{1 if new else 0},{len(new)} @@")
    status = "added" if before is None else "deleted" if after is None else "modified"
    return {
        "file": name,
        "patch": "\n".join(head + body) + "\n",
        "additions": additions,
        "deletions": deletions,
        "status": status,
    }
