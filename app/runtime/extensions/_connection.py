"""One MCP server's connection, with the official ``mcp`` SDK (imported on first use: start-up
time is tracked).

The SDK's transports and sessions are anyio task groups, which must be entered and left by the
same task; so each connection lives in an owner task that opens the transport, initializes, lists
the tools, then waits to be stopped. Calls are sent from the turns' tasks through the session.
Invariants: every wait is bounded (connect, listing, each call); a call that times out or loses
the connection marks the server ``failed`` and ends the connection (a local server's process is
terminated), so nothing hangs on or outlives a broken server; ``connect`` after that starts over.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from app import __version__
from app.processes import shell_child_environment, tied_group
from app.runtime.extensions._spec import CONNECT_SECONDS, ServerSpec

log = logging.getLogger("opensession.mcp")

STOP_SECONDS = 5.0


class NeedsAuth(Exception):
    """A remote server answered 401: OpenCode reports ``needs_auth`` (its OAuth flow is not
    hosted here, so the server stays unusable until its headers carry credentials)."""


class CallFailed(Exception):
    """The server could not answer the call (timeout, crash, closed connection); ``str`` is for
    the model and the user."""


def _http_status(exc: BaseException | None) -> int | None:
    """The HTTP status behind an error, looking through exception groups and causes."""
    seen = 0
    while exc is not None and seen < 20:
        seen += 1
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
            continue
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> str:
    """The innermost useful message of an error, unwrapping anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = getattr(exc, "message", None) or str(exc)
    return message if isinstance(message, str) and message else type(exc).__name__


class Connection:
    def __init__(self, spec: ServerSpec, directory: str, call_seconds: float) -> None:
        self.spec = spec
        self.directory = directory
        self.call_seconds = call_seconds
        self.status: dict[str, Any] = {"status": "disabled"}
        self.tools: list[Any] = []  # mcp Tool definitions, as last listed
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._ready.set()

    def start(self) -> None:
        """Connect in the background (no-op while connected or connecting)."""
        if self._task is not None and not self._task.done():
            return
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self.tools = []
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.spec.name}")

    async def ready(self) -> None:
        """Wait until the connection attempt ended (connected or failed)."""
        await self._ready.wait()

    async def stop(self, status: dict[str, Any] | None = None) -> None:
        """End the connection (and a local server's process); the status becomes ``status``."""
        task = self._task
        self._stop.set()
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_SECONDS)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except asyncio.CancelledError:
                # The caller was cancelled (a stopping server): the connection ends all the same,
                # and so does the caller. Swallowed, the caller would go on as if never cancelled
                # (a loop then waits for good, and the shutdown with it).
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
        if status is not None:
            self.status = status

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                session = await self._open(stack)
                listed = await asyncio.wait_for(session.list_tools(), self.spec.list_seconds)
                self.tools = list(listed.tools)
                self._session = session
                self.status = {"status": "connected"}
                self._ready.set()
                await self._stop.wait()
        except NeedsAuth:
            self.status = {"status": "needs_auth"}
        except Exception as exc:
            if not self._stop.is_set():
                error = "Failed to get tools" if isinstance(exc, TimeoutError) else describe(exc)
                log.warning("MCP server %s failed: %s", self.spec.name, error)
                self.status = {"status": "failed", "error": error}
        finally:
            self._session = None
            self.tools = []
            self._ready.set()

    async def _open(self, stack: AsyncExitStack) -> Any:
        if self.spec.type == "local":
            if not self.spec.command:
                raise ValueError("no command is configured")
            return await self._initialize(stack, await self._stdio(stack))
        last: Exception | None = None
        for transport in (self._streamable_http, self._sse):  # as OpenCode: streamable, then SSE
            attempt = AsyncExitStack()
            try:
                session = await self._initialize(attempt, await transport(attempt))
            except Exception as exc:
                await attempt.aclose()
                if _http_status(exc) == 401:
                    if self.spec.oauth:
                        raise NeedsAuth() from exc
                    raise ConnectionError(f"{self.spec.url} requires authentication (401 Unauthorized)") from exc
                last = exc
                continue
            stack.push_async_callback(attempt.aclose)
            return session
        assert last is not None
        raise last

    async def _initialize(self, stack: AsyncExitStack, streams: tuple[Any, ...]) -> Any:
        from mcp import ClientSession, Implementation

        read, write = streams[0], streams[1]
        info = Implementation(name="opensession", version=__version__)
        session = await stack.enter_async_context(ClientSession(read, write, client_info=info))
        try:
            await asyncio.wait_for(session.initialize(), CONNECT_SECONDS)
        except TimeoutError as exc:  # not "Failed to get tools": that names the listing's timeout
            raise ConnectionError(f"no answer to initialize within {CONNECT_SECONDS:g}s") from exc
        return session

    async def _stdio(self, stack: AsyncExitStack) -> tuple[Any, ...]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = self.spec.command[0]
        cwd = Path(self.directory) / self.spec.cwd if self.spec.cwd else Path(self.directory)
        env = shell_child_environment({**os.environ, **self.spec.environment})
        errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        try:
            # The SDK starts the server as a process group's leader and ends the group when it
            # closes; tied, the group also ends with a killed server (``npx`` and what it runs).
            program, *args = tied_group(self.spec.command, env)
            params = StdioServerParameters(command=program, args=args, env=env, cwd=cwd)
            return tuple(await stack.enter_async_context(stdio_client(params, errlog=errlog)))
        except OSError as exc:  # the bare errno text names no program
            raise ConnectionError(f"Cannot start {command}: {exc.strerror or exc}") from exc

    async def _streamable_http(self, stack: AsyncExitStack) -> tuple[Any, ...]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=self.spec.headers, timeout=httpx2.Timeout(30.0, read=300.0))
        )
        return tuple(await stack.enter_async_context(streamable_http_client(self.spec.url, http_client=http)))

    async def _sse(self, stack: AsyncExitStack) -> tuple[Any, ...]:
        from mcp.client.sse import sse_client

        return tuple(await stack.enter_async_context(sse_client(self.spec.url, headers=self.spec.headers)))

    async def refresh(self) -> None:
        """List the tools again (as OpenCode does for every step, so a server whose tools change
        is seen without notifications); a server that cannot list them is ``failed``."""
        session = self._session
        if session is None:
            return
        try:
            listed = await asyncio.wait_for(session.list_tools(), self.spec.list_seconds)
        except Exception as exc:
            error = "Failed to get tools" if isinstance(exc, TimeoutError) else describe(exc)
            await self.stop({"status": "failed", "error": error})
            return
        self.tools = list(listed.tools)

    async def resources(self) -> list[Any]:
        """The server's resources; none if it has none, fails or is slow (as OpenCode: logged)."""
        listed = await self._optional("resources/list", lambda s: s.list_resources())
        return list(listed.resources) if listed is not None else []

    async def prompts(self) -> list[Any]:
        """The server's prompts; none if it has none, fails or is slow (as OpenCode: logged)."""
        listed = await self._optional("prompts/list", lambda s: s.list_prompts())
        return list(listed.prompts) if listed is not None else []

    async def prompt_text(self, name: str, arguments: dict[str, str]) -> str:
        """A prompt's text messages, one per line (empty if the server cannot give it)."""
        got = await self._optional("prompts/get", lambda s: s.get_prompt(name, arguments))
        messages = got.messages if got is not None else []
        return "\n".join(m.content.text if m.content.type == "text" else "" for m in messages)

    async def _optional(self, what: str, request: Callable[[Any], Awaitable[Any]]) -> Any:
        session = self._session
        if session is None:
            return None
        try:
            return await asyncio.wait_for(request(session), self.spec.list_seconds)
        except Exception as exc:
            log.info("MCP server %s: no answer to %s: %s", self.spec.name, what, describe(exc))
            return None

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call ``tool``; a protocol-level failure raises CallFailed and fails the server."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        session = self._session
        if session is None:
            raise CallFailed(f"MCP server {self.spec.name} is not connected ({self.status['status']})")
        try:
            return await asyncio.wait_for(
                session.call_tool(tool, arguments, read_timeout_seconds=self.call_seconds), self.call_seconds + 1
            )
        except (TimeoutError, MCPError) as exc:
            code = exc.code if isinstance(exc, MCPError) else REQUEST_TIMEOUT
            if code == REQUEST_TIMEOUT:
                error = f"MCP server {self.spec.name} did not answer {tool} within {self.call_seconds:g}s"
            elif code == CONNECTION_CLOSED:
                error = f"MCP server {self.spec.name} closed the connection during {tool}"
            else:  # the server answered with a JSON-RPC error: it is still up
                raise CallFailed(f"MCP server {self.spec.name}: {describe(exc)}") from exc
        await self.stop({"status": "failed", "error": error})
        raise CallFailed(error)
