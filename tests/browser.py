"""A real headless Chromium (Debian's ``chromium``, driven by Playwright) for the tests that need
a browser's own behaviour: what a page renders, and what a hostile page can send."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM_PATHS = ("chromium", "chromium-browser")
# Without these, Chromium reaches out to Google's hosts at start; the tests stay on loopback.
QUIET = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium(*args: str) -> Iterator[Any]:
    """A launched browser; ``args`` are extra command-line switches."""
    from playwright.sync_api import sync_playwright

    executable = next((shutil.which(name) for name in CHROMIUM_PATHS if shutil.which(name)), None)
    if executable is None:
        pytest.fail("Chromium is not installed: .ci/run installs it (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=[*QUIET, *args])
        try:
            yield browser
        finally:
            browser.close()
