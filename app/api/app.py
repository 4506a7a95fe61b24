"""The ASGI application: routers, error handlers, middleware and the runtime's lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute

from app import __version__
from app.api import (
    errors,
    home,
    observability,
    opensession,
    permissions,
    placement,
    pty_forward,
    questions,
    share,
)
from app.api.bodies import TextBodies
from app.api.browser import ALLOWED_ORIGINS, BrowserGuard
from app.api.legacy import auth as legacy_auth
from app.api.legacy import config as legacy_config
from app.api.legacy import events as legacy_events
from app.api.legacy import files as legacy_files
from app.api.legacy import mcp as legacy_mcp
from app.api.legacy import meta as legacy_meta
from app.api.legacy import project as legacy_project
from app.api.legacy import pty as legacy_pty
from app.api.legacy import sessions as legacy_sessions
from app.api.legacy import tui as legacy_tui
from app.api.legacy import worktree as legacy_worktree
from app.api.middleware import BasicAuth, BodyLimit, RequestContext, StopAnswer
from app.api.v2 import fs as v2_fs
from app.api.v2 import integrations as v2_integrations
from app.api.v2 import meta as v2_meta
from app.api.v2 import pty as v2_pty
from app.api.v2 import sessions as v2_sessions
from app.runtime.service import Runtime
from app.settings import Settings

HOT_PREFIXES = ("session", "api/session", "event", "api/event", "global")


def _prefix(route: BaseRoute) -> str:
    """The literal head of a route's path: its first segment, two under ``/api``."""
    segments = getattr(route, "path", "").strip("/").split("/")
    return "/".join(segments[:2] if segments[0] == "api" else segments[:1])


def hot_routes_first(routes: list[BaseRoute]) -> list[BaseRoute]:
    """The routes, those clients call all the time (sessions, prompts, event streams) first.

    Why: FastAPI matches a request against the routes one by one, and about 150 of them cost more
    than the rest of admitting a prompt. They also go straight onto the app's router rather than
    through ``include_router``, which (in FastAPI 0.16x) keeps each router as one entry that a
    request is matched against twice. Moving routes is safe because no route's path starts with
    a parameter: two routes with different literal heads never match the same path, and routes
    with the same head keep their order (the sort is stable)."""
    assert all(not _prefix(route).startswith("{") for route in routes), "a route path starts with a parameter"
    rank = {prefix: index for index, prefix in enumerate(HOT_PREFIXES)}
    return sorted(routes, key=lambda route: rank.get(_prefix(route), len(rank)))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    runtime = Runtime(settings)
    forwarder = pty_forward.Forwarder(runtime.terminals)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()
            await forwarder.aclose()

    app = FastAPI(
        title="opensession",
        version=__version__,
        description="OpenCode-compatible agent session server",
        openapi_url="/doc",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    errors.install(app)
    routes: list[BaseRoute] = []
    for router in (
        legacy_meta.router,
        legacy_project.router,
        legacy_config.router,
        legacy_auth.router,
        legacy_mcp.router,
        legacy_sessions.router,
        legacy_events.router,
        legacy_files.router,
        legacy_tui.router,
        legacy_worktree.router,
        v2_sessions.router,
        legacy_pty.router,
        v2_pty.router,
        v2_meta.router,
        v2_fs.router,
        v2_integrations.router,
        share.router,
        permissions.router,
        questions.router,
        opensession.router,
        home.router,
        observability.router,
    ):
        routes.extend(router.routes)
    app.router.routes.extend(hot_routes_first(routes))
    # Inside BodyLimit: it reads whole bodies, which BodyLimit bounds; the import streams its own.
    app.add_middleware(TextBodies, streamed=frozenset({opensession.IMPORT_PATH}))
    # Outside TextBodies (a forwarded body goes as the client sent it), inside the guards below.
    app.add_middleware(pty_forward.PtyForwarding, forwarder=forwarder)
    app.add_middleware(placement.Placement, forwarder=forwarder, runtime=runtime)
    app.add_middleware(
        BodyLimit, limit=settings.max_body_bytes, streamed={opensession.IMPORT_PATH: settings.max_import_bytes}
    )
    if settings.password:
        app.add_middleware(
            BasicAuth, username=settings.username, password=settings.password, probes=observability.PROBES
        )
    app.add_middleware(BrowserGuard, origins=settings.cors, hosts=settings.request_hosts)
    app.add_middleware(StopAnswer)  # inside CORS: a browser reads the 503 too
    # Outermost: a preflight is answered before authentication (browsers send it without
    # credentials), while the real request still needs them.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors,
        allow_origin_regex=ALLOWED_ORIGINS,
        allow_methods=["GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"],
        allow_headers=["*"],
        max_age=86400,
    )
    app.add_middleware(RequestContext)  # outermost: every answer, a refusal too, has its id
    return app
