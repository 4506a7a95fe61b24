"""A runtime on a real database (each engine, through ``settings``), no server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.runtime.service import Runtime
from app.settings import Settings


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    runtime = Runtime(settings)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()
