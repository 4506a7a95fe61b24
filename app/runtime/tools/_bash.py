"""bash: run a command in the session's directory.

Output (stdout and stderr, merged) streams into the running part's ``metadata.output``; the
command has a timeout; on abort, timeout or any failure of the call (its progress not recorded)
its whole process group is killed (SIGTERM, then SIGKILL), so a ``sleep`` started by the command
does not outlive it. The group is tied to the server (``app.processes.tied_group``): a server
killed mid-command takes the command and what it started in the background along, so nothing
goes on writing to a project that another process may have taken the session over in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
from typing import Any

from app.processes import tied_group
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
        chunks: list[str] = []
        last_progress = 0.0  # the first output shows at once; later updates at most every PROGRESS_INTERVAL
        timed_out = False

        async def pump() -> None:
            nonlocal last_progress
            assert process.stdout is not None
            async with asyncio.timeout(timeout):
                while data := await process.stdout.read(4096):
                    chunks.append(data.decode(errors="replace"))
                    if time.monotonic() - last_progress >= PROGRESS_INTERVAL:
                        last_progress = time.monotonic()
                        await ctx.progress({"output": "".join(chunks)[-4000:], "description": description})
                await process.wait()

        try:
            await ctx.progress({"output": "", "description": description})  # clients show a live block at once
            await ctx.signal.race(pump())
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
        output, truncated = truncate("".join(chunks))
        if timed_out:
            notice = f"bash tool terminated command after exceeding timeout {timeout * 1000:.0f} ms"
            output += f"\n\n<bash_metadata>\n{notice}\n</bash_metadata>"
        metadata = {"output": output, "exit": process.returncode, "description": description, "truncated": truncated}
        return ToolResult(output, title=command, metadata=metadata)
