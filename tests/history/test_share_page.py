"""The share page in a real headless Chromium (Debian's ``chromium``, driven by Playwright): the
transcript renders (markdown, highlighted code, folded tool calls and reasoning), a new message
appears without a reload, a revoked share answers 404, and behind a password the page (and only
it) stays readable without credentials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.browser import chromium
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer, thread_server

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _shared(client: httpx.Client, *prompts: str) -> tuple[str, str]:
    sid = create_session(client, title="Shared session")["id"]
    for prompt in prompts:
        assert client.post(f"/session/{sid}/message", json=text_prompt(prompt)).status_code == 200
    return sid, client.post(f"/session/{sid}/share").json()["share"]["url"]


def test_page_renders_the_transcript_and_updates_live(client: httpx.Client, browser: Any) -> None:
    sid, url = _shared(
        client,
        "REASON before answering",
        "Here is **bold** and code:\n\n```python\ndef add(a, b):\n    return a + b\n```",
    )
    assert client.post(f"/session/{sid}/message", json=text_prompt("TOOL:bash echo from-the-tool")).status_code == 200
    page = browser.new_page()
    try:
        page.goto(url)
        page.wait_for_selector("#status:has-text('Live')")
        assert page.locator("h1").inner_text() == "Shared session"
        assert page.locator("article.user strong", has_text="bold").count() >= 1  # markdown, not raw asterisks
        code = page.locator("article.assistant pre code").first
        assert "def add" in code.inner_text()
        assert code.locator("span").count() > 0  # highlighted by Pygments
        tool = page.locator("details.tool").first
        assert tool.get_attribute("open") is None  # folded until clicked
        assert "bash" in tool.locator("summary").inner_text()
        tool.locator("summary").click()
        assert "from-the-tool" in tool.inner_text()
        assert page.locator("details.reasoning").count() >= 1

        before = page.locator("article").count()
        assert client.post(f"/session/{sid}/message", json=text_prompt("a live update arrives")).status_code == 200
        page.wait_for_selector("article.assistant:has-text('a live update arrives')", timeout=10_000)
        assert page.locator("article").count() == before + 2  # no reload: the same page grew

        assert client.delete(f"/session/{sid}/share").status_code == 200
        assert httpx.get(url).status_code == 404
        assert client.post(f"/session/{sid}/message", json=text_prompt("after revoking")).status_code == 200
        page.wait_for_selector("#status:has-text('revoked')", timeout=10_000)
        assert "after revoking" not in page.content()
    finally:
        page.close()


def test_untrusted_text_is_escaped(client: httpx.Client) -> None:
    _sid, url = _shared(client, '<script>alert("x")</script> <img src=x onerror=alert(1)>')
    body = httpx.get(url).text
    assert "<img src=x" not in body and '<script>alert("x")' not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body


@pytest.fixture
def guarded(settings: Settings) -> Iterator[ThreadServer]:
    with thread_server(settings.model_copy(update={"password": "s3cret"})) as handle:
        yield handle


def test_share_is_readable_without_the_server_password(guarded: ThreadServer, browser: Any) -> None:
    auth = httpx.BasicAuth("opencode", "s3cret")
    with httpx.Client(base_url=guarded.url, auth=auth, timeout=30.0) as client:
        _sid, url = _shared(client, "visible to whoever has the link")
    token = url.rsplit("/", 1)[1]
    assert httpx.get(f"{guarded.url}/session").status_code == 401  # everything else still guarded
    assert httpx.post(f"{guarded.url}/share/{token}").status_code == 401  # only reads are public
    for suffix in ("", "/data", "/transcript"):
        assert httpx.get(f"{url}{suffix}").status_code == 200, suffix
    page = browser.new_page()
    try:
        page.goto(url)
        page.wait_for_selector("#status:has-text('Live')")
        assert "visible to whoever has the link" in page.locator("#transcript").inner_text()
    finally:
        page.close()
