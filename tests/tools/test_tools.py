"""Each tool against a real temporary directory: results, error cases and confinement."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from app.runtime.abort import Aborted
from app.runtime.agents import Denied
from app.runtime.tools import TOOLS, ToolError
from app.store.database import DatabaseUnavailable
from tests.helpers import create_session, running, text_prompt
from tests.tool_harness import Harness


async def test_read_with_line_ranges(tools: Harness) -> None:
    (tools.root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    whole = await tools.run("read", filePath="notes.txt")
    assert "1: line 1" in whole.output and "10: line 10" in whole.output and "total 10 lines" in whole.output
    part = await tools.run("read", filePath="notes.txt", offset=3, limit=2)
    assert "3: line 3\n4: line 4" in part.output and "5: line 5" not in part.output
    assert "offset=5" in part.output and part.metadata["truncated"] is True
    with pytest.raises(ToolError, match="File not found"):
        await tools.run("read", filePath="missing.txt")


async def test_write_edit_and_their_errors(tools: Harness) -> None:
    result = await tools.run("write", filePath="src/app.py", content="x = 1\ny = 1\n")
    assert result.output == "Wrote file successfully." and result.metadata["exists"] is False
    assert (tools.root / "src/app.py").read_text() == "x = 1\ny = 1\n"
    edited = await tools.run("edit", filePath="src/app.py", oldString="x = 1", newString="x = 2")
    assert (tools.root / "src/app.py").read_text() == "x = 2\ny = 1\n"
    patch = edited.metadata["diff"]  # a full unified diff, as OpenCode clients render it
    assert patch.startswith("---") and "@@" in patch and "-x = 1\n+x = 2\n" in patch
    assert edited.metadata["filediff"]["additions"] == 1 and edited.metadata["filediff"]["deletions"] == 1
    with pytest.raises(ToolError, match="not found"):
        await tools.run("edit", filePath="src/app.py", oldString="z = 3", newString="z = 4")
    with pytest.raises(ToolError, match="2 matches"):
        await tools.run("edit", filePath="src/app.py", oldString=" = ", newString=" := ")
    await tools.run("edit", filePath="src/app.py", oldString=" = ", newString=" := ", replaceAll=True)
    assert (tools.root / "src/app.py").read_text() == "x := 2\ny := 1\n"
    with pytest.raises(ToolError, match="different"):
        await tools.run("edit", filePath="src/app.py", oldString="x", newString="x")
    assert ("edit", ["src/app.py"]) in tools.asked


async def test_list_glob_grep(tools: Harness) -> None:
    for name, text in {
        "a.py": "def alpha():\n    pass\n",
        "pkg/b.py": "ALPHA = 1\n",
        "c.txt": "nothing\n",
        ".git/config": "alpha\n",
    }.items():
        (tools.root / name).parent.mkdir(parents=True, exist_ok=True)
        (tools.root / name).write_text(text)
    listing = (await tools.run("list")).output
    assert "  a.py" in listing and "  pkg/\n    b.py" in listing and ".git" not in listing
    found = (await tools.run("glob", pattern="**/*.py")).output.splitlines()
    assert sorted(Path(p).name for p in found) == ["a.py", "b.py"]
    grep = (await tools.run("grep", pattern="(?i)alpha", include="*.py")).output
    assert grep.startswith("Found 2 matches") and "Line 1: def alpha():" in grep and ".git" not in grep
    with pytest.raises(ToolError, match="Invalid regular expression"):
        await tools.run("grep", pattern="(")


@pytest.mark.parametrize("escape", ["../outside.txt", "/etc/hostname", "link/secret.txt"])
async def test_escapes_need_the_external_directory_permission(tools: Harness, tmp_path: Path, escape: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (tmp_path / "outside.txt").write_text("secret")
    os.symlink(outside, tools.root / "link")
    tools.refuse.add("external_directory")
    with pytest.raises(Denied):
        await tools.run("read", filePath=escape)
    with pytest.raises(Denied):
        await tools.run("write", filePath=escape, content="pwned")
    assert (outside / "secret.txt").read_text() == "secret" and (tmp_path / "outside.txt").read_text() == "secret"
    permission, patterns = tools.asked[0]
    assert permission == "external_directory" and patterns[0].endswith("/*")  # the folder, as OpenCode asks
    tools.refuse.clear()
    assert (
        "secret"
        in (await tools.run("read", filePath=escape.replace("/etc/hostname", str(outside / "secret.txt")))).output
        or escape == "/etc/hostname"
    )


async def test_bash_streams_output_and_reports_exit(tools: Harness) -> None:
    result = await tools.run("bash", command="echo one; sleep 0.3; echo two; exit 3", description="demo")
    assert result.output == "one\ntwo\n" and result.metadata["exit"] == 3
    assert tools.progress[0] == {"output": "", "description": "demo"}  # the running block appears at once
    assert tools.progress[1]["output"] == "one\n"  # output streams before the command ends
    assert tools.asked == [("bash", ["echo one; sleep 0.3; echo two; exit 3"])]
    slow = await tools.run("bash", command="echo start; sleep 5", timeout=300)
    assert "start" in slow.output and "exceeding timeout" in slow.output


async def test_bash_output_keeps_a_character_written_in_two_pieces(tools: Harness) -> None:
    """The two bytes of "é" reach the pipe apart, so two reads get one each: each used to be
    decoded alone, into two replacement characters."""
    result = await tools.run("bash", command="printf '\\303'; sleep 0.3; printf '\\251\\n'")
    assert result.output == "é\n"


async def test_bash_abort_kills_the_whole_process_group(tools: Harness) -> None:
    marker = tools.root / "pid"
    task = asyncio.ensure_future(tools.run("bash", command=f"sleep 30 & echo $! > {marker}; wait"))
    for _ in range(1500):  # up to 30 s on a loaded machine
        if marker.exists() and marker.read_text().strip():
            break
        await asyncio.sleep(0.02)
    child = int(marker.read_text())
    tools.signal.fire()
    with pytest.raises(Aborted):
        await task
    await asyncio.sleep(0.1)
    assert not running(child)  # the sleep died with its group


async def test_bash_ends_with_the_shell_while_what_it_started_runs_on(tools: Harness) -> None:
    """A server started with ``&`` keeps the output open: the call still ends when the shell
    exits, as OpenCode's does (it used to wait for the timeout, then kill the server), and what
    the server writes afterwards is read and dropped, so it never blocks on a full pipe."""
    marker, through = tools.root / "pid", tools.root / "through"
    background = f"(sleep 0.3; head -c 1000000 /dev/zero; touch {through}; sleep 30) & echo $! > {marker}"
    began = time.monotonic()
    result = await tools.run("bash", command=f"{background}; echo launched")
    assert time.monotonic() - began < 5
    assert result.output == "launched\n" and result.metadata["exit"] == 0
    runner = int(marker.read_text())
    try:
        for _ in range(500):  # a megabyte written after the call: more than a pipe holds
            if through.exists():
                break
            await asyncio.sleep(0.02)
        assert through.exists() and running(runner)
    finally:
        os.killpg(os.getpgid(runner), signal.SIGKILL)


async def test_bash_whose_progress_cannot_be_recorded_kills_the_command(tools: Harness) -> None:
    """The command's progress write fails (the database went away, or the process was frozen past
    its lease mid-write): the call fails, and the command does not go on writing to the project."""
    marker, late = tools.root / "pid", tools.root / "late.txt"
    context = tools.context()

    async def failing(metadata: dict) -> None:  # the first write, once the command runs
        for _ in range(1500):
            if marker.exists() and marker.read_text().strip():
                break
            await asyncio.sleep(0.02)
        raise DatabaseUnavailable("the progress could not be recorded")

    context.progress = failing
    command = f"echo $$ > {marker}; sleep 1; echo late > {late}"
    with pytest.raises(DatabaseUnavailable):
        await TOOLS["bash"].run(context, {"command": command})
    shell = int(marker.read_text())
    await asyncio.sleep(1.5)
    assert not running(shell) and not late.exists()


async def test_todos_round_trip(tools: Harness) -> None:
    todos = [
        {"content": "write tests", "status": "in_progress", "priority": "high"},
        {"content": "ship", "status": "pending", "priority": "medium"},
    ]
    written = await tools.run("todowrite", todos=todos)
    assert written.title == "2 todos"
    read = await tools.run("todoread")
    assert read.metadata["todos"] == todos
    with pytest.raises(ToolError):
        await tools.run("todowrite", todos=[{"content": "x", "status": "someday", "priority": "high"}])


async def test_file_tools_check_the_name_given_and_where_a_symlink_leads(tools: Harness) -> None:
    """write, edit and read are checked under both names of a symlinked path, so a rule on either
    one holds: an allowed alias of a denied file, and a denied name that links to an allowed one."""
    root = tools.root
    (root / "locked").mkdir()
    (root / "locked" / "key.txt").write_text("key\n")
    (root / "alias.txt").symlink_to(root / "locked" / "key.txt")
    (root / "plain.txt").write_text("plain\n")
    (root / ".env").symlink_to(root / "plain.txt")
    for permission in ("edit", "read"):
        tools.rules += [
            {"permission": permission, "pattern": "*", "action": "allow"},
            {"permission": permission, "pattern": "locked/*", "action": "deny"},
            {"permission": permission, "pattern": ".env", "action": "deny"},
        ]
    for name in ("alias.txt", ".env"):
        with pytest.raises(Denied):
            await tools.run("write", filePath=name, content="pwned\n")
        with pytest.raises(Denied):
            await tools.run("edit", filePath=name, oldString="\n", newString="!\n")
        with pytest.raises(Denied):
            await tools.run("read", filePath=name)
    assert (root / "locked" / "key.txt").read_text() == "key\n" and (root / "plain.txt").read_text() == "plain\n"
    await tools.run("write", filePath="plain.txt", content="changed\n")
    assert "changed" in (await tools.run("read", filePath="plain.txt")).output


def test_tools_that_list_a_name_that_is_not_utf8_complete(client: httpx.Client, project_dir: Path) -> None:
    """glob, list and read of a directory holding such a name once left the tool running forever
    (its output could not be stored); the name reaches the model with U+FFFD for the byte."""
    with open(os.fsencode(project_dir) + b"/bad\xff.txt", "wb") as handle:
        handle.write(b"needle\n")
    sid = create_session(client)["id"]
    for directive in ('TOOL:glob {"pattern": "*"}', "TOOL!:list {}", "TOOL:read .", "TOOL:grep needle"):
        reply = client.post(f"/session/{sid}/message", json=text_prompt(directive))
        assert reply.status_code == 200 and reply.json()["info"]["time"].get("completed"), reply.text
        messages = client.get(f"/session/{sid}/message").json()
        tool = [p for m in messages for p in m["parts"] if p["type"] == "tool"][-1]
        assert tool["state"]["status"] == "completed" and "bad\ufffd.txt" in tool["state"]["output"], directive
