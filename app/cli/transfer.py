"""``opensession export ID`` and ``opensession import FILE``: a session as OpenCode's export JSON
(``{info, messages: [{info, parts}]}``), so sessions move between opensession databases and from
OpenCode itself. The server checks the whole file before it writes anything (all or nothing) and
refuses a session that already exists, so importing a file twice makes no duplicate."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from app.cli.client import add_attach, connect, target_directory
from app.cli.common import CliError


def register(commands: Any) -> None:
    export = commands.add_parser("export", help="print a session as JSON (OpenCode's export format)")
    export.add_argument("session", metavar="ID", help="session id")
    export.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of standard output")
    add_attach(export)
    export.set_defaults(handler=export_main)
    imported = commands.add_parser("import", help="import a session exported by opensession or OpenCode")
    imported.add_argument("file", metavar="FILE", help="an export file")
    imported.add_argument("--directory", help="project directory the session belongs to (default: the server's)")
    add_attach(imported)
    imported.set_defaults(handler=import_main)


def export_main(args: argparse.Namespace) -> int:
    with connect(args) as api:
        info = api.call("GET", f"/session/{args.session}")
        messages = api.call("GET", f"/session/{args.session}/message")
    text = json.dumps({"info": info, "messages": messages}, indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"Exported session: {info['id']} -> {args.output}", file=sys.stderr)
    return 0


def import_main(args: argparse.Namespace) -> int:
    """The file goes to the server as it is read (the server checks it, a message at a time, and
    names the first problem), so a long session's export takes little memory here either."""
    with ExitStack() as stack:
        try:
            content = stack.enter_context(Path(args.file).open("rb"))
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        api = stack.enter_context(connect(args))
        info = api.call(
            "POST",
            "/opensession/import",
            directory=target_directory(args),
            content=content,
            headers={"content-type": "application/json"},
        )
    print(f"Imported session: {info['id']}")
    return 0
