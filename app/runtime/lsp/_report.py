"""How diagnostics reach the model: OpenCode 1.18's ``Diagnostic.report``, a block per file of
its errors (warnings and hints stay in the part's metadata)."""

from __future__ import annotations

from app.runtime.lsp._client import Diagnostic

MAX_PER_FILE = 20
_SEVERITY = {1: "ERROR", 2: "WARN", 3: "INFO", 4: "HINT"}


def pretty(diagnostic: Diagnostic) -> str:
    start = diagnostic.get("range", {}).get("start", {"line": 0, "character": 0})
    label = _SEVERITY.get(diagnostic.get("severity") or 1, "ERROR")
    return f"{label} [{start.get('line', 0) + 1}:{start.get('character', 0) + 1}] {diagnostic.get('message', '')}"


def report(file: str, diagnostics: list[Diagnostic]) -> str:
    """``<diagnostics file=...>`` with the file's errors (at most ``MAX_PER_FILE``, then how
    many more); empty when it has none."""
    errors = [d for d in diagnostics if d.get("severity") == 1]
    if not errors:
        return ""
    more = len(errors) - MAX_PER_FILE
    tail = f"\n... and {more} more" if more > 0 else ""
    lines = "\n".join(pretty(d) for d in errors[:MAX_PER_FILE])
    return f'<diagnostics file="{file}">\n{lines}{tail}\n</diagnostics>'
