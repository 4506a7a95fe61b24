"""``opensession serve``: start the HTTP + SSE server."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import sys
from contextlib import suppress
from typing import Any

from app import __version__
from app.cli.common import check_database

STARTUP_FAILURE = 3  # the exit status uvicorn gives a server that did not start

LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(commands: Any) -> None:
    serve = commands.add_parser("serve", help="start the HTTP + SSE server")
    serve.add_argument("--hostname", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 4096)")
    serve.add_argument("--db", help="SQLite file path or database URL (default: user data directory)")
    serve.add_argument("--directory", help="default project directory (default: current directory)")
    serve.add_argument(
        "--allow-public", action="store_true", help="allow binding a non-loopback address without a password"
    )
    serve.add_argument(
        "--cors",
        action="append",
        metavar="ORIGIN",
        help="also allow this browser origin (repeatable; OPENSESSION_CORS=a,b does the same)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        dest="allowed_hosts",
        metavar="NAME",
        help="also accept requests for this host name without a password (repeatable; * for any)",
    )
    serve.add_argument(
        "--advertise-url",
        metavar="URL",
        help="where the other processes on the same database reach this one (default http://HOSTNAME:PORT)",
    )
    serve.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines for people (text, the default) or JSON objects with request and session ids",
    )
    serve.add_argument(
        "--metrics", action="store_true", help="serve Prometheus metrics at /metrics (OPENSESSION_METRICS=1)"
    )
    serve.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    gc.disable()  # until the server is up and its heap frozen: app/api/server.py says why
    from app.settings import Settings

    given = {
        "hostname": args.hostname,
        "port": args.port,
        "db": args.db,
        "directory": args.directory,
        "cors": args.cors,
        "allowed_hosts": args.allowed_hosts,
        "log_format": args.log_format,
        "advertise_url": args.advertise_url,
    }
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if args.allow_public:
        overrides["allow_public"] = True
    if args.metrics:
        overrides["metrics"] = True
    settings = Settings(**overrides)
    if not _is_loopback(settings.hostname) and not settings.password and not settings.allow_public:
        print(
            f"refusing to serve on {settings.hostname} without a password: set OPENCODE_SERVER_PASSWORD "
            "or pass --allow-public",
            file=sys.stderr,
        )
        return 2

    from app.observability import logs

    logs.configure(settings.log_format, args.log_level, password=settings.password)
    check_database(settings)

    import uvicorn

    from app.api.app import create_app
    from app.api.server import Server
    from app.processes import keep_inherited_descriptors_from_children

    keep_inherited_descriptors_from_children()
    print(
        f"opensession {__version__} listening on http://{settings.hostname}:{settings.port} "
        f"(database: {settings.database_url})",
        flush=True,
    )
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.hostname,
        port=settings.port,
        log_level=args.log_level,
        access_log=False,
        log_config=None,  # the root logger's handler (app/observability/logs.py) writes uvicorn's too
        timeout_graceful_shutdown=settings.graceful_seconds,  # type: ignore[arg-type]  # int annotated, any float waited
    )
    server = Server(config, app.state.runtime, freeze_heap=True)
    with suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else STARTUP_FAILURE
