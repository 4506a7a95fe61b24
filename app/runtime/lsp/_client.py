"""One language server process and the connection to it (pygls' client over the process's
stdio): OpenCode 1.18's LSP client, which opens or changes documents, keeps the diagnostics the
server pushes (``textDocument/publishDiagnostics``) and those it is asked for
(``textDocument/diagnostic``, when the server registers the capability, as pyright does), and
waits for a document's diagnostics after a change, bounded.

pygls turns the server's messages into lsprotocol objects; diagnostics are kept as the JSON the
server sent (unstructured again), since that is what the tool parts carry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

from app.processes import tied

if TYPE_CHECKING:
    from lsprotocol import types

log = logging.getLogger("opensession.lsp")
T = TypeVar("T")

INITIALIZE_TIMEOUT_SECONDS = 45.0
DOCUMENT_WAIT_SECONDS = 5.0  # how long a write waits for its file's diagnostics
PULL_TIMEOUT_SECONDS = 3.0
QUIET_SECONDS = 0.15  # after a push, how long no other push must come
REQUEST_TIMEOUT_SECONDS = 10.0
SHUTDOWN_SECONDS = 2.0

# File extensions and the language ids servers expect (OpenCode's table, the common part).
LANGUAGES = {
    ".py": "python", ".pyi": "python", ".ts": "typescript", ".tsx": "typescriptreact", ".mts": "typescript",
    ".cts": "typescript", ".js": "javascript", ".jsx": "javascriptreact", ".mjs": "javascript",
    ".cjs": "javascript", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c", ".cpp": "cpp", ".cc": "cpp",
    ".cxx": "cpp", ".hpp": "cpp", ".cs": "csharp", ".java": "java", ".kt": "kotlin", ".rb": "ruby",
    ".php": "php", ".lua": "lua", ".sh": "shellscript", ".bash": "shellscript", ".zsh": "shellscript",
    ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".jsonc": "jsonc", ".vue": "vue", ".svelte": "svelte",
    ".astro": "astro", ".css": "css", ".html": "html", ".zig": "zig", ".swift": "swift", ".dart": "dart",
    ".ex": "elixir", ".exs": "elixir", ".ml": "ocaml", ".mli": "ocaml", ".hs": "haskell", ".nix": "nix",
    ".tf": "terraform", ".tex": "latex", ".typ": "typst", ".gleam": "gleam", ".clj": "clojure",
    ".jl": "julia", ".prisma": "prisma", ".dockerfile": "dockerfile",
}  # fmt: skip


class Position(TypedDict):
    line: int
    character: int


class Range(TypedDict):
    start: Position
    end: Position


class Diagnostic(TypedDict, total=False):
    """An LSP diagnostic as the server sent it (only what the server reads is named)."""

    range: Range
    severity: int
    message: str
    code: int | str
    source: str


def _key(diagnostic: Diagnostic) -> tuple[Any, ...]:
    """What makes two diagnostics the same (OpenCode de-duplicates on these)."""
    span = diagnostic.get("range", {})
    start, end = span.get("start", {}), span.get("end", {})
    return (
        str(diagnostic.get("code")),
        diagnostic.get("severity"),
        diagnostic.get("message"),
        diagnostic.get("source"),
        start.get("line"),
        start.get("character"),
        end.get("line"),
        end.get("character"),
    )


def unique(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for diagnostic in diagnostics:
        key = _key(diagnostic)
        if key not in seen:
            seen.add(key)
            kept.append(diagnostic)
    return kept


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start a server: its command line, what it adds to the environment, and its
    ``initializationOptions`` (also its answer to ``workspace/configuration``)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    initialization: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Pushed:
    at: float
    version: int | None


class ClientFailed(Exception):
    """The server could not be started or initialized."""


def _uri(path: Path) -> str:
    return path.as_uri()


def _path(uri: str) -> str | None:
    from pygls.uris import to_fs_path

    return to_fs_path(uri) if uri.startswith("file://") else None


def _section(settings: dict[str, Any], section: str | None) -> Any:
    """``workspace/configuration``'s answer for ``section`` (dotted) of ``settings``."""
    if not section:
        return settings or None
    value: Any = settings
    for part in section.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _end_of(text: str) -> tuple[int, int]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return len(lines) - 1, len(lines[-1])


class LspClient:
    """A started and initialized server for one root. Build with ``start``."""

    def __init__(self, server_id: str, root: Path, launch: Launch) -> None:
        from pygls.lsp.client import LanguageClient

        self.server_id = server_id
        self.root = root
        self.launch = launch
        self._client = LanguageClient("opensession", "1")
        self._converter = self._client.protocol._converter  # lsprotocol's objects back to JSON
        self._pushed: dict[str, list[Diagnostic]] = {}
        self._pulled: dict[str, list[Diagnostic]] = {}
        self._order: dict[str, None] = {}  # files in the order first seen
        self._push_times: dict[str, _Pushed] = {}
        self._push_listeners: set[Callable[[str], None]] = set()
        self._registration_listeners: set[Callable[[], None]] = set()
        self._registrations: dict[str, dict[str, Any]] = {}
        self._documents: dict[str, tuple[int, str]] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._sync_kind = 1
        self._diagnostic_provider = False
        self.on_exit: Callable[[LspClient], None] | None = None
        self._closing = False
        self._register_handlers()

    # -- the server's messages -------------------------------------------------------------------

    def _register_handlers(self) -> None:
        from lsprotocol import types

        client = self._client

        def published(params: types.PublishDiagnosticsParams) -> None:
            path = _path(params.uri)
            if path is None:
                return
            self._push_times[path] = _Pushed(time.monotonic(), params.version)
            self._order.setdefault(path, None)
            self._pushed[path] = self._raw(params.diagnostics)
            for listener in list(self._push_listeners):
                listener(path)

        def configuration(params: types.ConfigurationParams) -> list[Any]:
            return [_section(self.launch.initialization, item.section) for item in params.items]

        def register(params: types.RegistrationParams) -> None:
            changed = False
            for registration in params.registrations:
                if registration.method == types.TEXT_DOCUMENT_DIAGNOSTIC:
                    options = self._converter.unstructure(registration.register_options) or {}
                    self._registrations[registration.id] = options if isinstance(options, dict) else {}
                    changed = True
            if changed:
                self._registrations_changed()

        def unregister(params: types.UnregistrationParams) -> None:
            if any(self._registrations.pop(u.id, None) is not None for u in params.unregisterations):
                self._registrations_changed()

        def folders(_params: None) -> list[types.WorkspaceFolder]:
            return [types.WorkspaceFolder(uri=_uri(self.root), name="workspace")]

        client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(published)
        client.feature(types.WORKSPACE_CONFIGURATION)(configuration)
        client.feature(types.CLIENT_REGISTER_CAPABILITY)(register)
        client.feature(types.CLIENT_UNREGISTER_CAPABILITY)(unregister)
        client.feature(types.WORKSPACE_WORKSPACE_FOLDERS)(folders)
        # pyright's own progress notifications, which it sends to every client
        for method in ("pyright/beginProgress", "pyright/reportProgress", "pyright/endProgress"):
            client.feature(method)(lambda _params: None)

        def nothing(_params: Any) -> None:
            return None

        for method in (
            types.WINDOW_WORK_DONE_PROGRESS_CREATE,
            types.WORKSPACE_DIAGNOSTIC_REFRESH,
            types.WORKSPACE_SEMANTIC_TOKENS_REFRESH,
            types.WORKSPACE_INLAY_HINT_REFRESH,
            types.WORKSPACE_CODE_LENS_REFRESH,
            types.WINDOW_SHOW_MESSAGE_REQUEST,
            types.WINDOW_LOG_MESSAGE,
            types.WINDOW_SHOW_MESSAGE,
            types.PROGRESS,
            types.TELEMETRY_EVENT,
            types.LOG_TRACE,
        ):
            client.feature(method)(nothing)

    def _raw(self, diagnostics: Sequence[types.Diagnostic]) -> list[Diagnostic]:
        """Diagnostics as the JSON the server sent (typed, cattrs unstructures them quickly)."""
        from lsprotocol import types

        return cast(list[Diagnostic], self._converter.unstructure(list(diagnostics), list[types.Diagnostic]))

    def _registrations_changed(self) -> None:
        for listener in list(self._registration_listeners):
            listener()

    # -- starting and stopping -------------------------------------------------------------------

    async def start(self, env: dict[str, str]) -> None:
        """Spawn the server (tied to this process's life) and initialize it; ClientFailed if it
        cannot start or does not answer within ``INITIALIZE_TIMEOUT_SECONDS``."""
        from lsprotocol import types
        from pygls.io_ import run_async

        full_env = {**env, **self.launch.env}
        try:
            process = await asyncio.create_subprocess_exec(
                *tied(self.launch.argv, full_env),
                cwd=self.root,
                env=full_env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # nothing reads it: a full pipe would block the server
            )
        except OSError as exc:
            raise ClientFailed(f"cannot start {self.launch.argv[0]}: {exc}") from exc
        assert process.stdin is not None and process.stdout is not None
        self._process = process
        client = self._client
        client.protocol.set_writer(process.stdin)
        reader = asyncio.create_task(
            run_async(stop_event=client._stop_event, reader=process.stdout, protocol=client.protocol, logger=log)
        )
        client._async_tasks.extend([reader, asyncio.create_task(self._watch_exit(process))])
        root = _uri(self.root)
        params = types.InitializeParams(
            process_id=os.getpid(),  # a server that watches its parent ends with this process
            root_uri=root,
            workspace_folders=[types.WorkspaceFolder(uri=root, name="workspace")],
            initialization_options=self.launch.initialization,
            capabilities=types.ClientCapabilities(
                window=types.WindowClientCapabilities(work_done_progress=True),
                workspace=types.WorkspaceClientCapabilities(
                    configuration=True,
                    did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
                    diagnostics=types.DiagnosticWorkspaceClientCapabilities(refresh_support=False),
                ),
                text_document=types.TextDocumentClientCapabilities(
                    synchronization=types.TextDocumentSyncClientCapabilities(),
                    diagnostic=types.DiagnosticClientCapabilities(
                        dynamic_registration=True, related_document_support=True
                    ),
                    publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=False),
                ),
            ),
        )
        try:
            result = await asyncio.wait_for(client.initialize_async(params), INITIALIZE_TIMEOUT_SECONDS)
        except Exception as exc:
            await self.shutdown()
            raise ClientFailed(f"{self.server_id} did not initialize: {exc!r}") from exc
        sync = result.capabilities.text_document_sync
        kind = sync if isinstance(sync, int) else getattr(sync, "change", None)
        self._sync_kind = int(kind) if kind is not None else 1
        self._diagnostic_provider = result.capabilities.diagnostic_provider is not None
        client.initialized(types.InitializedParams())
        if self.launch.initialization:
            client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(settings=self.launch.initialization)
            )

    async def _watch_exit(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if not self._closing:
            log.warning("language server %s (%s) exited with %s", self.server_id, self.root, code)
        self._client._stop_event.set()
        for future in list(self._client.protocol._request_futures.values()):
            if not future.done():
                future.set_exception(RuntimeError(f"{self.server_id} exited"))
        if self.on_exit is not None and not self._closing:
            self.on_exit(self)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None and not self._closing

    async def shutdown(self) -> None:
        """Ask the server to shut down, then end its process (bounded)."""
        self._closing = True
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            await self._answer(self._client.shutdown_async(None), SHUTDOWN_SECONDS)
            with suppress(Exception):  # gone already
                self._client.exit(None)
            with suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), SHUTDOWN_SECONDS)
        if process.returncode is None:
            process.kill()
            await process.wait()
        self._client._stop_event.set()
        tasks = [t for t in self._client._async_tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- documents -------------------------------------------------------------------------------

    def open(self, path: Path, text: str) -> int:
        """Tell the server ``path`` now holds ``text``: opened the first time, changed after
        (with the file watcher's notification, as an editor would). Returns its version."""
        from lsprotocol import types

        client = self._client
        key, uri = str(path), _uri(path)
        known = self._documents.get(key)
        if known is not None:
            client.workspace_did_change_watched_files(
                types.DidChangeWatchedFilesParams([types.FileEvent(uri=uri, type=types.FileChangeType.Changed)])
            )
            version = known[0] + 1
            self._documents[key] = (version, text)
            change: types.TextDocumentContentChangeEvent
            if self._sync_kind == 2:
                line, character = _end_of(known[1])
                whole = types.Range(types.Position(0, 0), types.Position(line, character))
                change = types.TextDocumentContentChangePartial(range=whole, text=text)
            else:
                change = types.TextDocumentContentChangeWholeDocument(text=text)
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(version, uri), [change])
            )
            return version
        client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams([types.FileEvent(uri=uri, type=types.FileChangeType.Created)])
        )
        self._pushed.pop(key, None)
        self._pulled.pop(key, None)
        language = LANGUAGES.get(path.suffix, "plaintext")
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, language, 0, text)))
        self._documents[key] = (0, text)
        return 0

    @property
    def diagnostics(self) -> dict[str, list[Diagnostic]]:
        """Every file's diagnostics this server reported, pushed and pulled, de-duplicated."""
        files = dict.fromkeys([*self._order, *self._pulled])
        return {f: unique([*self._pushed.get(f, []), *self._pulled.get(f, [])]) for f in files}

    # -- waiting for a document's diagnostics ----------------------------------------------------

    def _identifiers(self) -> tuple[bool, list[str | None]]:
        """Whether diagnostics can be pulled, and with which identifiers (None: without one)."""
        documents = [o for o in self._registrations.values() if o.get("workspaceDiagnostics") is not True]
        named = list(dict.fromkeys(o["identifier"] for o in documents if isinstance(o.get("identifier"), str)))
        supported = self._diagnostic_provider or bool(documents)
        return supported, [None, *named]

    async def _answer(self, pending: Awaitable[T], timeout: float) -> T | None:
        """A request's answer, None if it failed or did not come within ``timeout``. The request
        itself is not cancelled (pygls cannot take an answer to a cancelled one)."""
        future = asyncio.ensure_future(pending)
        future.add_done_callback(_retrieved)  # a late failure nobody waits for any more is no error
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except Exception:  # a dead or confused server, or a slow one: no answer
            return None

    async def _pull(self, path: Path, identifier: str | None, timeout: float) -> dict[str, list[Diagnostic]] | None:
        from lsprotocol import types

        params = types.DocumentDiagnosticParams(types.TextDocumentIdentifier(_uri(path)), identifier=identifier)
        report = await self._answer(self._client.text_document_diagnostic_async(params), timeout)
        if report is None:
            return None
        found: dict[str, list[Diagnostic]] = {}
        items = getattr(report, "items", None)
        if items is not None:
            found[str(path)] = self._raw(items)
        for uri, related in (getattr(report, "related_documents", None) or {}).items():
            other = _path(uri)
            related_items = getattr(related, "items", None)
            if other is not None and related_items is not None:
                found.setdefault(other, []).extend(self._raw(related_items))
        return found

    async def _pull_document(self, path: Path, timeout: float) -> bool:
        """Pull ``path``'s diagnostics (with every identifier at once); True once a report for
        it came back (kept, replacing what was pulled before)."""
        supported, identifiers = self._identifiers()
        if not supported:
            return False
        reports = await asyncio.gather(*(self._pull(path, i, timeout) for i in identifiers))
        merged: dict[str, list[Diagnostic]] = {}
        for report in reports:
            for file, items in (report or {}).items():
                merged.setdefault(file, []).extend(items)
        if not merged:
            return False
        for file, items in merged.items():
            self._pulled[file] = unique(items)
        return str(path) in merged

    async def _pushed_after(self, path: str, version: int, after: float, timeout: float) -> bool:
        """True once the server pushed ``path``'s diagnostics for this change and then kept quiet
        for ``QUIET_SECONDS``; False after ``timeout``."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        quiet: list[asyncio.TimerHandle] = []

        def settle() -> None:
            if not done.done():
                done.set_result(True)

        def check(changed: str) -> None:
            pushed = self._push_times.get(path)
            if changed != path or pushed is None:
                return
            if pushed.version is not None and pushed.version != version:
                return
            if pushed.at < after and pushed.version != version:
                return
            for handle in quiet:
                handle.cancel()
            quiet[:] = [loop.call_later(max(0.0, QUIET_SECONDS - (time.monotonic() - pushed.at)), settle)]

        self._push_listeners.add(check)
        check(path)
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            return False
        finally:
            self._push_listeners.discard(check)
            for handle in quiet:
                handle.cancel()

    async def _registration(self, timeout: float) -> bool:
        changed = asyncio.Event()
        listener = changed.set
        self._registration_listeners.add(listener)
        try:
            await asyncio.wait_for(changed.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._registration_listeners.discard(listener)

    async def wait_for_document(self, path: Path, version: int, after: float) -> None:
        """Wait (at most ``DOCUMENT_WAIT_SECONDS`` from ``after``) until ``path``'s diagnostics
        for ``version`` are in: pulled if the server offers that, else pushed."""
        deadline = after + DOCUMENT_WAIT_SECONDS
        push = asyncio.ensure_future(self._pushed_after(str(path), version, after, DOCUMENT_WAIT_SECONDS))
        try:
            while time.monotonic() < deadline and self.alive:
                # A pull may take the rest of the window: a server that has just started answers
                # its first one only once it has analysed the project.
                if await self._pull_document(path, max(PULL_TIMEOUT_SECONDS, deadline - time.monotonic())):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                registration = asyncio.ensure_future(self._registration(remaining))
                finished, _ = await asyncio.wait({push, registration}, return_when=asyncio.FIRST_COMPLETED)
                registration.cancel()
                if registration not in finished or not registration.result():
                    return
        finally:
            push.cancel()

    # -- requests (the lsp tool) -----------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """A request with JSON params; its JSON result, or None if it failed or timed out."""
        from lsprotocol.types import METHOD_TO_TYPES

        try:  # pygls sends lsprotocol's objects
            kind: Any = METHOD_TO_TYPES[method][2]
            typed = self._converter.structure(params, kind)
        except Exception as exc:  # an unknown method, or params that do not fit it
            log.warning("cannot send %s to %s: %s", method, self.server_id, exc)
            return None
        result = await self._answer(self._client.protocol.send_request_async(method, typed), REQUEST_TIMEOUT_SECONDS)
        return None if result is None else self._converter.unstructure(result)
