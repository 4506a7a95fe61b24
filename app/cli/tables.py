"""A table on stdout: ``rich`` on a terminal (NO_COLOR honoured), plain aligned columns otherwise
(a pipe, a file). The commands that list things share it."""

from __future__ import annotations

import os
import sys


def show(headers: list[str], rows: list[list[str]]) -> None:
    if sys.stdout.isatty():
        _rich(headers, rows)
    else:
        _plain(headers, rows)


def _plain(headers: list[str], rows: list[list[str]]) -> None:
    table = [[h.upper() for h in headers], *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _rich(headers: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*(h.capitalize() for h in headers), box=None, header_style="bold")
    for row in rows:
        table.add_row(*row)
    Console(no_color=bool(os.environ.get("NO_COLOR"))).print(table)
