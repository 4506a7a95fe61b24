"""``opensession sessions``: the most recently updated sessions, as a table (app/cli/tables.py)
or as JSON."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from app.cli.client import add_attach, connect
from app.cli.tables import show

COLUMNS = ("id", "title", "directory", "updated", "messages", "cost")


def register(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="list sessions")
    sessions.add_argument("--json", action="store_true", help="print JSON (one object per session)")
    sessions.add_argument("--limit", type=int, default=100, help="at most this many sessions (default 100)")
    add_attach(sessions)
    sessions.set_defaults(handler=main)


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    info = entry["info"]
    return {
        "id": info["id"],
        "title": info["title"],
        "directory": info["directory"],
        "updated": info["time"]["updated"],
        "messages": entry["messages"],
        "cost": info.get("cost", 0),
    }


def _cells(row: dict[str, Any]) -> list[str]:
    updated = datetime.fromtimestamp(row["updated"] / 1000).strftime("%Y-%m-%d %H:%M")
    return [row["id"], row["title"], row["directory"], updated, str(row["messages"]), f"${row['cost']:.4f}"]


def main(args: argparse.Namespace) -> int:
    with connect(args) as api:
        rows = [_row(entry) for entry in api.call("GET", "/opensession/sessions", params={"limit": args.limit})]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        show(list(COLUMNS), [_cells(row) for row in rows])
    return 0
