"""What LSP diagnostics and formatters add to a write (``"lsp"``/``"formatter"`` in opencode.json).

In one process, against a real language server (basedpyright, or pyright if it is on PATH) and
a real formatter (ruff), on a small Python project in a temporary directory:

1. ``write`` with both off: the baseline (what every tool call costs now; with them off the
   after-write step only reads the cached configuration).
2. the language server alone, warm: a bare pygls client of its own sends the change and pulls
   the file's diagnostics (``textDocument/diagnostic``), the server's own time for an edit.
3. ``write`` with ``"lsp": true`` on a warm server: the added delay is (3) - (1) - (2), what the
   client, its waiting and the report cost beyond the server's own work (target ≤ 50 ms).
4. ``write`` with ``"formatter": true`` (ruff): its overhead over (1), and ``ruff format`` run
   alone for comparison.

Each figure is the median (and p90) of ``--runs`` writes after a few warm-up ones; every write
changes the file (an undefined name on a different line), so the server re-analyses it.

    python bench/lsp.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import ConfigLoader  # noqa: E402
from app.processes import find_program  # noqa: E402
from app.runtime.abort import AbortSignal  # noqa: E402
from app.runtime.formatters import Formatters  # noqa: E402
from app.runtime.lsp import LanguageServers  # noqa: E402
from app.runtime.tools import TOOLS, ToolContext, ToolServices  # noqa: E402


class _Files:
    def edited(self, _session: Any, _path: Path) -> None:
        pass


async def _allow(*_args: Any) -> None:
    return None


def _context(directory: Path, services: ToolServices) -> ToolContext:
    session = {"id": "ses_bench", "directory": str(directory), "projectID": "global"}
    return ToolContext(session, "msg_bench", "call_bench", AbortSignal(), _allow, _allow, services)  # type: ignore[arg-type]


def _source(index: int) -> str:
    body = "".join(f"def f{i}(value: int) -> int:\n    return value + {i}\n\n\n" for i in range(20))
    return body + f"result = f{index % 20}(1) + undefined_{index}\n"


def _project(base: Path, name: str, config: dict[str, Any]) -> Path:
    directory = base / name
    directory.mkdir()
    (directory / "pyproject.toml").write_text('[project]\nname = "bench"\n\n[tool.ruff]\n')
    (directory / "opencode.json").write_text(json.dumps(config))
    return directory


def _summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(ordered) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms"


async def _writes(directory: Path, services: ToolServices, runs: int, checked: bool = False) -> list[float]:
    warmup = 3
    ctx = _context(directory, services)
    samples = []
    for index in range(warmup + runs):
        started = time.perf_counter()
        result = await TOOLS["write"].run(ctx, {"filePath": "module.py", "content": _source(index)})
        elapsed = time.perf_counter() - started
        if index >= warmup:
            samples.append(elapsed)
        if checked and index >= warmup:  # every measured write got its diagnostics
            assert "ERROR" in result.output, result.output
    return samples


async def _bare_server(directory: Path, runs: int) -> list[float]:
    """The server's own time: change + pull through a bare pygls client (no opensession code)."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    program = find_program("pyright-langserver") or find_program("basedpyright-langserver")
    assert program, "no pyright or basedpyright on PATH or beside this interpreter"
    client = LanguageClient("bench", "1")
    client.feature(types.WORKSPACE_CONFIGURATION)(lambda params: [None for _ in params.items])
    for method in (types.CLIENT_REGISTER_CAPABILITY, types.WINDOW_WORK_DONE_PROGRESS_CREATE,
                   types.WORKSPACE_DIAGNOSTIC_REFRESH, types.WINDOW_LOG_MESSAGE, types.PROGRESS,
                   "pyright/beginProgress", "pyright/reportProgress", "pyright/endProgress"):  # fmt: skip
        client.feature(method)(lambda _params: None)
    await client.start_io(program, "--stdio", cwd=str(directory))
    root = directory.as_uri()
    capabilities = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            diagnostic=types.DiagnosticClientCapabilities(dynamic_registration=True)
        )
    )
    await client.initialize_async(
        types.InitializeParams(capabilities=capabilities, process_id=os.getpid(), root_uri=root)
    )
    client.initialized(types.InitializedParams())
    path = directory / "module.py"
    path.write_text(_source(0))
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 0, _source(0))))
    pull = types.DocumentDiagnosticParams(types.TextDocumentIdentifier(uri))
    await client.text_document_diagnostic_async(pull)
    samples = []
    for version in range(1, runs + 4):
        text = _source(version)
        started = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version, uri),
                [types.TextDocumentContentChangeWholeDocument(text)],
            )
        )
        await client.text_document_diagnostic_async(pull)
        if version > 3:
            samples.append(time.perf_counter() - started)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return samples


def _ruff_alone(directory: Path, runs: int) -> list[float]:
    program = find_program("ruff")
    assert program, "ruff is not installed"
    path = directory / "alone.py"
    samples = []
    for index in range(runs):
        path.write_text(_source(index).replace("    return", "  return"))
        started = time.perf_counter()
        subprocess.run([program, "format", str(path)], cwd=directory, check=False, capture_output=True)
        samples.append(time.perf_counter() - started)
    return samples


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="opensession-lsp-bench-") as temp:
        base = Path(temp)
        user = str(base / "user-config")
        off = _project(base, "off", {})
        loader = ConfigLoader(user)
        lsp = LanguageServers(loader, lambda *_: None)
        formatters = Formatters(loader)
        on = ToolServices(todos=None, files=_Files(), tasks=None, formatters=formatters, lsp=lsp)  # type: ignore[arg-type]
        baseline = await _writes(off, on, runs)
        bare = ToolServices(todos=None, files=_Files(), tasks=None)  # type: ignore[arg-type]
        no_step = await _writes(off, bare, runs)
        print(f"write, lsp and formatter off:            {_summary(baseline)}")
        print(f"write, no after-write step at all:        {_summary(no_step)}")
        server = await _bare_server(_project(base, "bare", {}), runs)
        print(f"language server alone (change + pull):   {_summary(server)}")
        checked = _project(base, "lsp", {"lsp": True})
        with_lsp = await _writes(checked, on, runs, checked=True)
        print(f"write, lsp on (warm server):             {_summary(with_lsp)}")
        added = statistics.median(with_lsp) - statistics.median(baseline) - statistics.median(server)
        print(f"  added beyond the server's own time:    median {added * 1000:7.1f} ms (target <= 50 ms)")
        formatted = _project(base, "fmt", {"formatter": True})
        with_fmt = await _writes(formatted, on, runs)
        print(f"write, formatter on (ruff):              {_summary(with_fmt)}")
        alone = _ruff_alone(formatted, runs)
        print(f"ruff format alone (subprocess.run):      {_summary(alone)}")
        fmt_added = statistics.median(with_fmt) - statistics.median(baseline) - statistics.median(alone)
        print(f"  added beyond ruff's own time:          median {fmt_added * 1000:7.1f} ms")
        await lsp.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    asyncio.run(main(parser.parse_args().runs))
