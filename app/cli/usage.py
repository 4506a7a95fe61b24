"""``opensession usage``: what the agents spent, tokens and cost totalled from the stored
assistant messages, by model, directory or day (``GET /opensession/usage`` of the server it
attaches to, or of one it starts on the database), as a table or as JSON."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from app.cli.client import add_attach, connect
from app.cli.common import CliError
from app.cli.tables import show

HEADERS = ["group", "messages", "input", "output", "reasoning", "cache read", "cache write", "cost"]
_SPAN = re.compile(r"^(\d+)([mhdw])$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def register(commands: Any) -> None:
    usage = commands.add_parser("usage", help="tokens and cost of the stored sessions")
    usage.add_argument(
        "--since", help="only what was spent since: a span back from now (30m, 24h, 7d, 2w) or a date (2026-12-01)"
    )
    usage.add_argument("--by", choices=["model", "directory", "day"], default="model", help="group by (default model)")
    usage.add_argument("--json", action="store_true", help="print the report as JSON")
    add_attach(usage)
    usage.set_defaults(handler=main)


def since_ms(text: str | None, now: float | None = None) -> int:
    """``--since`` as a time in ms (0: everything)."""
    if not text:
        return 0
    now = time.time() if now is None else now
    if span := _SPAN.match(text):
        return int((now - int(span.group(1)) * _UNIT_SECONDS[span.group(2)]) * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--since {text!r}: give a span (30m, 24h, 7d, 2w) or a date (2026-12-01)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _cells(group: dict[str, Any]) -> list[str]:
    counts = [group[k] for k in ("messages", "input", "output", "reasoning", "cache_read", "cache_write")]
    return [group["key"], *(f"{n:,}" for n in counts), f"${group['cost']:.4f}"]


def main(args: argparse.Namespace) -> int:
    params = {"since": since_ms(args.since), "by": args.by}
    with connect(args) as api:
        report = api.call("GET", "/opensession/usage", params=params)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        show(HEADERS, [*(_cells(g) for g in report["groups"]), _cells(report["total"])])
    return 0
