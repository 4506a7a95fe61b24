"""The ASGI application: routers, error handlers, middleware and the runtime's lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from app import __version__
from app.api import errors, opensession, permissions, questions, share
from app.api.legacy import auth as legacy_auth
from app.api.legacy import events as legacy_events
from app.api.legacy import files as legacy_files
from app.api.legacy import mcp as legacy_mcp
from app.api.legacy import meta as legacy_meta
from app.api.legacy import pty as legacy_pty
from app.api.legacy import sessions as legacy_sessions
from app.api.legacy import tui as legacy_tui
from app.api.middleware import ALLOWED_ORIGINS, BasicAuth, BodyLimit
from app.api.v2 import fs as v2_fs
from app.api.v2 import meta as v2_meta
from app.api.v2 import pty as v2_pty
from app.api.v2 import sessions as v2_sessions
from app.runtime.service import Runtime
from app.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    runtime = Runtime(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

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
    app.include_router(legacy_meta.router)
    app.include_router(legacy_auth.router)
    app.include_router(legacy_mcp.router)
    app.include_router(legacy_sessions.router)
    app.include_router(legacy_events.router)
    app.include_router(legacy_files.router)
    app.include_router(legacy_tui.router)
    app.include_router(v2_sessions.router)
    app.include_router(legacy_pty.router)
    app.include_router(v2_pty.router)
    app.include_router(v2_meta.router)
    app.include_router(v2_fs.router)
    app.include_router(share.router)
    app.include_router(permissions.router)
    app.include_router(questions.router)
    app.include_router(opensession.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.password:
        app.add_middleware(BasicAuth, username=settings.username, password=settings.password)
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
    return app
