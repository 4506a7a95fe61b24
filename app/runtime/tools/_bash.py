"""bash: run a command in the session's directory.

Output (stdout and stderr, merged) streams into the running part's ``metadata.output``. The call
ends when the shell exits, as OpenCode's does, even where something it started in the
background (``npm run dev &``) keeps the output open; that goes on running. The command has a
timeout; on abort, timeout or any failure of the call (its progress not recorded) its whole
process group is killed (SIGTERM, then SIGKILL), background processes included. While the shell
runs, the group is tied to the server (``app.processes.tied_group``): a server killed mid-command
takes the command and what it started in the background along, so nothing goes on writing to a
project that another process may have taken the session over in.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shlex
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.processes import read_on, shell_exit, tied_group
from app.runtime.tools._base import ToolContext, ToolError, ToolResult, require, schema, truncate

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
PROGRESS_INTERVAL = 0.2
KILL_GRACE = 2.0


def _always_pattern(command: str) -> str:
    """What approving "always" covers: the command's program with any arguments (``git *``)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return f"{words[0]} *" if words else "*"


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            await asyncio.wait_for(process.wait(), KILL_GRACE)
            return
        except TimeoutError:
            continue


class Bash:
    name = "bash"
    description = "Run a shell command in the project directory. Output is returned; long runs time out."
    parameters = schema(
        {
            "command": {"type": "string"},
            "timeout": {"type": "integer", "description": "Milliseconds (default 120000, at most 600000)"},
            "description": {"type": "string", "description": "What the command does, in a few words"},
        },
        ["command"],
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        command = require(args, "command")
        description = str(args.get("description") or "")
        await ctx.ask("bash", [command], [_always_pattern(command)], {"command": command})
        timeout = min(max(int(args.get("timeout") or DEFAULT_TIMEOUT_MS), 1), MAX_TIMEOUT_MS) / 1000
        try:
            process = await asyncio.create_subprocess_exec(
                *tied_group(["bash", "-c", command]),  # a server killed mid-command takes the command with it
                cwd=str(ctx.directory),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:  # the directory is gone, or not on this machine
            raise ToolError(f"Could not start the command in {ctx.directory}: {exc.strerror or exc}") from exc
        assert process.stdout is not None
        output = _Output(process.stdout, lambda text: ctx.progress({"output": text, "description": description}))
        reading = asyncio.create_task(output.read())
        timed_out = False
        try:
            await ctx.progress({"output": "", "description": description})  # clients show a live block at once
            async with asyncio.timeout(timeout):
                await ctx.signal.race(shell_exit(process, reading))
        except TimeoutError:
            timed_out = True
            await _kill_group(process)
        except OSError as exc:
            await _kill_group(process)
            raise ToolError(f"Could not run the command: {exc}") from exc
        except BaseException:
            # An abort, and anything else that ends the call while the command runs (its progress
            # could not be recorded: the database went away, or the process was frozen past its
            # lease): the command must not go on without the turn that ran it.
            await _kill_group(process)
            raise
        finally:
            await output.close()
            read_on(reading)
        text, truncated = truncate(output.text)
        if timed_out:
            notice = f"bash tool terminated command after exceeding timeout {timeout * 1000:.0f} ms"
            text += f"\n\n<bash_metadata>\n{notice}\n</bash_metadata>"
        metadata = {"output": text, "exit": process.returncode, "description": description, "truncated": truncated}
        return ToolResult(text, title=command, metadata=metadata)


class _Output:
    """The command's merged output, read as it comes and shown while the call runs (the first
    chunk at once, later ones at most every ``PROGRESS_INTERVAL``). Once the call has answered
    (``close``), what the command left in the background is still read, and dropped: it would
    block on a full pipe otherwise, and no update may land after the call's result."""

    def __init__(self, stdout: asyncio.StreamReader, show: Callable[[str], Awaitable[None]]) -> None:
        self._stdout = stdout
        self._show = show
        self._chunks: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span reads
        self._open = True
        self._showing = asyncio.Lock()
        self._last_shown = 0.0

    @property
    def text(self) -> str:
        return "".join(self._chunks)

    async def read(self) -> None:
        while data := await self._stdout.read(4096):
            if not self._open:
                continue
            self._chunks.append(self._decoder.decode(data))
            if time.monotonic() - self._last_shown >= PROGRESS_INTERVAL:
                self._last_shown = time.monotonic()
                async with self._showing:
                    if self._open:
                        await self._show(self.text[-4000:])
        if self._open:
            self._chunks.append(self._decoder.decode(b"", final=True))  # a cut-off character, shown replaced

    async def close(self) -> None:
        """No more output is kept or shown; returns once an update under way has landed."""
        async with self._showing:
            self._open = False
