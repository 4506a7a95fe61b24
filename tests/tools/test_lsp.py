"""LSP diagnostics and formatters as OpenCode 1.18 has them (``"lsp"``/``"formatter"`` in
opencode.json), against a real language server (basedpyright, the dev extra's) and a real
formatter (ruff): one server, one project and one warm language server serve the end-to-end
checks; the rest runs no language server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import ConfigLoader
from app.runtime.formatters import Formatters
from app.runtime.lsp import Diagnostic, LanguageServers, Position, report
from app.runtime.tools import ToolServices
from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import StubReply, ThreadServer, free_port, openai_stub, thread_server
from tests.sse import EventCollector

BUILTIN_FORMATTERS = [
    *("zig", "uv", "terraform", "standardrb", "shfmt", "rustfmt", "ruff", "rubocop", "air", "prettier"),
    *("pint", "oxfmt", "ormolu", "ocamlformat", "nixfmt", "mix", "latexindent", "ktlint", "htmlbeautifier"),
    *("gofmt", "gleam", "dfmt", "dart", "cljfmt", "clang-format", "biome"),
]
UNDEFINED = "def total(values):\n    return sum(values) + undefined_name_xyz\n"
UGLY = "def f( a,b ):\n  return {'a':a,'b':b}\n"


class Model:
    """The stub model's script: each prompt's text names the tool call to make (as JSON), and a
    tool result is answered with "done"."""

    def __call__(self, body: dict[str, Any]) -> StubReply:
        if "title generator" in json.dumps(body["messages"][0]):
            return StubReply(content=["t"])
        last = body["messages"][-1]
        if last["role"] == "tool":
            return StubReply(content=["done"])
        call = json.loads(last["content"] if isinstance(last["content"], str) else last["content"][0]["text"])
        return StubReply(
            content=[], tool_calls=[{"id": "call_1", "name": call["tool"], "arguments": json.dumps(call["args"])}]
        )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadServer, httpx.Client, Path]]:
    """A Python project with ``"lsp": true, "formatter": true`` behind one server (SQLite), its
    model a stub that makes the tool calls the prompts name."""
    base = tmp_path_factory.mktemp("lsp")
    directory, config_dir = base / "project", base / "config"
    directory.mkdir()
    config_dir.mkdir()
    (directory / "pyproject.toml").write_text('[project]\nname = "demo"\n\n[tool.ruff]\nline-length = 100\n')
    (directory / "main.py").write_text("print('hello')\n")
    with openai_stub(Model()) as stub:
        config = {
            "model": "stub/m",
            "provider": {
                "stub": {
                    "npm": "@ai-sdk/openai-compatible",
                    "options": {"baseURL": stub.url},
                    "models": {"m": {}, "gpt-5": {}},
                }
            },
            "lsp": True,
            "formatter": True,
        }
        (directory / "opencode.json").write_text(json.dumps(config))
        settings = Settings(
            db=f"sqlite+aiosqlite:///{base / 'db.sqlite'}",
            directory=str(directory),
            config_dir=str(config_dir),
            data_dir=str(base / "data"),
            port=free_port(),
            heartbeat_seconds=10.0,
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("OPENCODE_EXPERIMENTAL_LSP_TOOL", "1")  # read once, as the server starts
            started = thread_server(settings)
            server = started.__enter__()
        try:
            with httpx.Client(base_url=server.url, timeout=60.0) as client:
                yield server, client, directory
        finally:
            started.__exit__(None, None, None)


def _tool(client: httpx.Client, tool: str, model: str = "m", **args: Any) -> dict[str, Any]:
    """One prompt whose turn calls ``tool``; the tool part's state."""
    sid = create_session(client)["id"]
    prompt = text_prompt(json.dumps({"tool": tool, "args": args}), model={"providerID": "stub", "modelID": model})
    client.post(f"/session/{sid}/message", json=prompt).raise_for_status()
    messages = client.get(f"/session/{sid}/message").json()
    parts = [p for m in messages for p in m["parts"] if p["type"] == "tool"]
    assert len(parts) == 1, parts
    return parts[0]["state"]


@pytest.mark.slow
def test_python_project_end_to_end(project: tuple[ThreadServer, httpx.Client, Path]) -> None:
    server, client, directory = project
    assert client.get("/lsp").json() == []  # nothing touched yet
    with EventCollector(f"{server.url}/event") as events:
        _tool(client, "read", filePath="main.py")  # warms pyright, waits for nothing
        events.wait_for(lambda f: f.type == "lsp.updated", timeout=60)
    assert client.get("/lsp").json() == [{"id": "pyright", "name": "pyright", "root": "", "status": "connected"}]
    # A fresh server's first analysis may outlast a write's bounded wait (as in OpenCode): one
    # write lets it finish before the checks.
    _tool(client, "write", filePath="warm.py", content="x = 1\n")

    # An undefined name: the write's result names the error at its line and column.
    bad = directory / "bad.py"
    state = _tool(client, "write", filePath="bad.py", content=UNDEFINED)
    block = f'<diagnostics file="{bad}">\nERROR [2:26] "undefined_name_xyz" is not defined\n</diagnostics>'
    assert state["output"] == f"Wrote file successfully.\n\nLSP errors detected in this file, please fix:\n{block}"
    found = state["metadata"]["diagnostics"][str(bad)]
    error = next(d for d in found if d["severity"] == 1)
    assert error["range"]["start"] == {"line": 1, "character": 25} and error["code"] == "reportUndefinedVariable"
    assert state["metadata"]["filepath"] == str(bad) and state["metadata"]["exists"] is False

    # Fixed by an edit: the file keeps its key, with no errors left, and only its own errors count.
    state = _tool(client, "edit", filePath="bad.py", oldString=" + undefined_name_xyz", newString="")
    assert state["output"] == "Edit applied successfully."
    assert [d for d in state["metadata"]["diagnostics"][str(bad)] if d["severity"] == 1] == []

    # Badly formatted code is formatted on disk (ruff: the project configures it) before it is
    # checked; the edit's diff is the formatted text's.
    state = _tool(client, "write", filePath="ugly.py", content=UGLY)
    assert (directory / "ugly.py").read_text() == 'def f(a, b):\n    return {"a": a, "b": b}\n'
    state = _tool(client, "edit", filePath="ugly.py", oldString='"b": b', newString="'c':  b")
    assert (directory / "ugly.py").read_text() == 'def f(a, b):\n    return {"a": a, "c": b}\n'
    assert '+    return {"a": a, "c": b}' in state["metadata"]["diff"]

    # Another file's errors come after a write's own.
    state = _tool(client, "write", filePath="second.py", content="value = missing_one\n")
    assert 'ERROR [1:9] "missing_one" is not defined' in state["output"]
    state = _tool(client, "write", filePath="third.py", content="x = 1\n")
    assert state["output"].startswith("Wrote file successfully.\n\nLSP errors detected in other files:\n")
    assert f'<diagnostics file="{directory / "second.py"}">' in state["output"]
    assert state["metadata"]["diagnostics"][str(directory / "third.py")] == []

    # apply_patch (GPT models get it instead of edit/write) reports each changed file's errors.
    patch = "*** Begin Patch\n*** Add File: pkg/patched.py\n+print(nowhere)\n*** End Patch"
    state = _tool(client, "apply_patch", model="gpt-5", patchText=patch)
    block = (
        f'<diagnostics file="{directory / "pkg" / "patched.py"}">\nERROR [1:7] "nowhere" is not defined\n</diagnostics>'
    )
    assert state["output"].endswith(f"\n\nLSP errors detected in pkg/patched.py, please fix:\n{block}")
    assert str(directory / "pkg" / "patched.py") in state["metadata"]["diagnostics"]

    formatters = client.get("/formatter").json()
    assert [f["name"] for f in formatters] == BUILTIN_FORMATTERS
    ruff = next(f for f in formatters if f["name"] == "ruff")
    assert ruff == {"name": "ruff", "extensions": [".py", ".pyi"], "enabled": True}
    assert next(f for f in formatters if f["name"] == "uv")["enabled"] is False  # ruff is enabled

    # The experimental lsp tool asks the same servers.
    (directory / "use.py").write_text("from second import value\n\nprint(value)\n")
    state = _tool(client, "lsp", operation="goToDefinition", filePath="use.py", line=3, character=8)
    assert state["title"] == "goToDefinition use.py:3:8"
    assert [r["uri"] for r in state["metadata"]["result"]] == [(directory / "second.py").as_uri()]
    state = _tool(client, "lsp", operation="documentSymbol", filePath="ugly.py", line=1, character=1)
    assert state["metadata"]["result"][0]["name"] == "f" and state["title"] == "documentSymbol ugly.py"
    state = _tool(client, "lsp", operation="hover", filePath="ugly.py", line=1, character=5)
    assert "(function) def f(" in state["metadata"]["result"][0]["contents"]["value"]
    state = _tool(client, "lsp", operation="hover", filePath="pyproject.toml", line=1, character=1)
    assert state["status"] == "error" and "No LSP server available for this file type." in state["error"]

    # Disposing the instance ends its language servers; the next touch starts them again.
    client.post("/instance/dispose").raise_for_status()
    assert client.get("/lsp").json() == []


def test_off_by_default(client: httpx.Client, project_dir: Path) -> None:
    """Without ``lsp``/``formatter`` (OpenCode 1.18's default) both lists are empty and writes are
    neither formatted nor checked."""
    (project_dir / "pyproject.toml").write_text("[tool.ruff]\n")
    assert client.get("/lsp").json() == [] and client.get("/formatter").json() == []


def test_report_shows_errors_only_and_at_most_twenty() -> None:
    def diagnostic(line: int, severity: int) -> Diagnostic:
        place: Position = {"line": line, "character": 4}
        return {"range": {"start": place, "end": place}, "severity": severity, "message": f"m{line}"}

    assert report("/p/a.py", [diagnostic(0, 2), diagnostic(1, 4)]) == ""
    text = report("/p/a.py", [diagnostic(i, 1) for i in range(23)] + [diagnostic(99, 2)])
    lines = text.splitlines()
    assert (
        lines[0] == '<diagnostics file="/p/a.py">' and lines[1] == "ERROR [1:5] m0" and lines[20] == "ERROR [20:5] m19"
    )
    assert lines[21:] == ["... and 3 more", "</diagnostics>"]


class _Files:
    def edited(self, _session: Any, _path: Path) -> None:
        pass


def _services(directory: Path, config: dict[str, Any]) -> tuple[ToolServices, LanguageServers, list[str]]:
    (directory / "opencode.json").write_text(json.dumps(config))
    loader = ConfigLoader(str(directory / "no-user-config"))
    published: list[str] = []
    lsp = LanguageServers(loader, lambda kind, _props, _dir: published.append(kind))
    services = ToolServices(todos=None, files=_Files(), tasks=None, formatters=Formatters(loader), lsp=lsp)  # type: ignore[arg-type]
    return services, lsp, published


async def test_broken_servers_and_formatters_never_fail_a_tool(tmp_path: Path) -> None:
    """A server that cannot start or exits at once, and a formatter that fails, are skipped:
    the write succeeds, unformatted and unchecked."""
    from tests.tool_harness import Harness

    config = {
        "lsp": {
            "pyright": {"disabled": True},
            "gone": {"command": ["/nonexistent/ls"], "extensions": [".py"]},
            "quits": {"command": ["true"], "extensions": [".py"]},
        },
        "formatter": {"ruff": {"disabled": True}, "broken": {"command": ["false", "$FILE"], "extensions": [".py"]}},
    }
    services, lsp, published = _services(tmp_path, config)
    harness = Harness(tmp_path, services)
    started = time.monotonic()
    result = await harness.run("write", filePath="a.py", content="x = undefined\n")
    assert result.output == "Wrote file successfully." and result.metadata["diagnostics"] == {}
    assert time.monotonic() - started < 5
    assert (tmp_path / "a.py").read_text() == "x = undefined\n"
    assert lsp.status(str(tmp_path)) == [] and published == []
    statuses = await services.formatters.status(str(tmp_path))  # type: ignore[union-attr]
    names = [s["name"] for s in statuses]
    assert "ruff" not in names and "uv" not in names and names[-1] == "broken" and statuses[-1]["enabled"] is True
    await lsp.stop()


async def test_a_configured_formatter_runs_with_its_file_directory_and_environment(tmp_path: Path) -> None:
    script = 'printf "%s|%s|%s" "$1" "$PWD" "$MARK" > "$1.seen"'
    config = {
        "formatter": {
            "mark": {
                "command": ["sh", "-c", script, "sh", "$FILE"],
                "extensions": [".txt"],
                "environment": {"MARK": "on"},
            }
        }
    }
    services, lsp, _published = _services(tmp_path, config)
    from tests.tool_harness import Harness

    await Harness(tmp_path, services).run("write", filePath="notes.txt", content="hi\n")
    target = tmp_path.resolve() / "notes.txt"
    assert Path(f"{target}.seen").read_text() == f"{target}|{tmp_path}|on"
    await lsp.stop()
