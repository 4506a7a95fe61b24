"""How the client commands reach a server: over HTTP, either a running one (``--attach URL``, basic
auth from ``OPENCODE_SERVER_PASSWORD``) or one started in this process on a free loopback port on
the default database. Every failure becomes a CliError: one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from app.cli.common import CliError, check_database

if TYPE_CHECKING:
    import httpx

START_TIMEOUT_SECONDS = 30.0


def add_attach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attach", metavar="URL", help="use a running server (default: start one here, on the default database)"
    )


def auth() -> tuple[str, str] | None:
    """Basic auth credentials, as OpenCode's own clients take them from the environment."""
    password = os.environ.get("OPENCODE_SERVER_PASSWORD") or os.environ.get("OPENSESSION_PASSWORD")
    if not password:
        return None
    username = os.environ.get("OPENCODE_SERVER_USERNAME") or os.environ.get("OPENSESSION_USERNAME") or "opencode"
    return username, password


def error_message(response: httpx.Response) -> str:
    """The server's own message from an OpenCode error body (named or tagged), else the status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        data = body.get("data")
        message = data.get("message") if isinstance(data, dict) else body.get("message")
        if isinstance(message, str) and message:
            return message
        if body.get("name") == "ProviderModelNotFoundError" and isinstance(data, dict):
            wanted = f"{data.get('providerID')}/{data.get('modelID')}"
            suggestions = data.get("suggestions") or []
            hint = f". Did you mean: {', '.join(map(str, suggestions))}?" if suggestions else ""
            return f"Model not found: {wanted}{hint}"
    return f"HTTP {response.status_code} {response.reason_phrase}"


def json_body(response: httpx.Response) -> Any:
    """The decoded JSON body, None when there is none; ValueError when it is not JSON (OpenCode
    answers unknown routes with its web app)."""
    return response.json() if response.content else None


class Api:
    """The calls the commands make, with errors turned into CliError."""

    def __init__(self, base_url: str) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, auth=auth(), timeout=httpx.Timeout(30.0, read=None))

    def close(self) -> None:
        self._http.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code == 401:
            raise CliError(f"{self.base_url} refused the credentials: set OPENCODE_SERVER_PASSWORD")
        if response.status_code == 404 and response.request.url.path.startswith("/opensession/"):
            raise CliError(f"{self.base_url} has no {response.request.url.path} (not an opensession server?)")
        if response.status_code >= 400:
            raise CliError(error_message(response))
        return response

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        import httpx

        try:
            yield
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.base_url}: {exc or type(exc).__name__}") from None

    def call(self, method: str, path: str, *, directory: str | None = None, **kwargs: Any) -> Any:
        """One request; the decoded JSON body (None when there is none)."""
        if directory is not None:
            kwargs["params"] = {**kwargs.get("params", {}), "directory": directory}
        with self._reaching():
            response = self._check(self._http.request(method, path, **kwargs))
        try:
            return json_body(response)
        except ValueError:
            raise CliError(f"{self.base_url} has no {path} (not an opensession server?)") from None

    @contextmanager
    def events(self, directory: str) -> Iterator[Iterator[dict[str, Any]]]:
        """The ``/event`` stream of ``directory``, open (its ``server.connected`` frame read) when
        this yields, so nothing published afterwards is missed."""
        from httpx_sse import connect_sse

        with self._reaching(), connect_sse(self._http, "GET", "/event", params={"directory": directory}) as source:
            self._check(source.response)
            frames = (frame.json() for frame in source.iter_sse() if frame.data)
            next(frames, None)  # server.connected
            yield frames


@contextmanager
def _local_server() -> Iterator[str]:
    """Start the server in this process on a free 127.0.0.1 port (uvicorn in a thread) and yield
    its URL; SQLite serves one process per file, so a server already running on the default
    database is reported with the way out (``--attach``)."""
    import uvicorn

    from app.api.app import create_app
    from app.api.server import Server
    from app.processes import keep_inherited_descriptors_from_children
    from app.settings import Settings

    keep_inherited_descriptors_from_children()
    settings = Settings()
    check_database(settings, busy_hint="; to use a server running on it, pass --attach http://HOST:PORT")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(settings)
    config = uvicorn.Config(app, log_level="error", access_log=False, timeout_graceful_shutdown=1)
    server = Server(config, app.state.runtime)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="opensession-local", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise CliError(f"the local server did not start (database: {settings.database_url})")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[Api]:
    """The server the command talks to: ``--attach URL``, or one started here for the command."""
    with ExitStack() as stack:
        api = Api(args.attach or stack.enter_context(_local_server()))
        stack.callback(api.close)
        yield api


def target_directory(args: argparse.Namespace) -> str | None:
    """``--directory`` made absolute (None: the server's own directory, this one when local)."""
    directory: str | None = getattr(args, "directory", None)
    return os.path.abspath(directory) if directory else None
