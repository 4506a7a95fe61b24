"""The websearch tool, as OpenCode 1.18 offers it (off by default, its switches, its parameters
and output), on its three backends, each a stub on 127.0.0.1 speaking that API's own format:
Exa's and Parallel's MCP endpoints (a stateless JSON-RPC ``tools/call`` answered with server-sent
events or JSON, as streamable-HTTP MCP servers answer) and SearXNG's JSON search API. Through a
real server, with the echo model scripting the calls."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from app.runtime.tools import ToolSettings
from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import thread_server
from tests.stubs import loopback_server

# The tool does not touch the database: one engine is enough.
SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# Every switch the tool reads: a test sets the ones it means, none leak in from the environment.
SWITCHES = (
    "OPENCODE_EXPERIMENTAL",
    "OPENCODE_ENABLE_EXA",
    "OPENCODE_EXPERIMENTAL_EXA",
    "OPENCODE_ENABLE_PARALLEL",
    "OPENCODE_EXPERIMENTAL_PARALLEL",
    "OPENCODE_WEBSEARCH_PROVIDER",
    "OPENCODE_CLIENT",
    "OPENCODE_ENABLE_QUESTION_TOOL",
    "OPENSESSION_WEBSEARCH",
    "OPENSESSION_EXA_URL",
    "OPENSESSION_PARALLEL_URL",
    "OPENSESSION_SEARXNG_URL",
    "EXA_API_KEY",
    "PARALLEL_API_KEY",
)

# What a web search stub answers: status, content type, body.
Reply = tuple[int, str, str]


@dataclass
class SearchStub:
    """A search API on 127.0.0.1: records each request (method, path, query, headers, JSON body)
    and answers what ``answer`` says."""

    url: str
    answer: Callable[[dict[str, Any]], Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def search_stub(answer: Callable[[dict[str, Any]], Reply]) -> Iterator[SearchStub]:
    stub = SearchStub("", answer)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            return

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = {
                "method": self.command,
                "path": parts.path,
                "query": parse_qs(parts.query),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json.loads(raw) if raw else None,
            }
            stub.requests.append(request)
            status, kind, body = stub.answer(request)
            payload = body.encode()
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                pass

        do_GET = do_POST = _serve

    with loopback_server(Handler) as url:
        stub.url = url
        yield stub


def mcp_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return {"result": result, "jsonrpc": "2.0", "id": 1}


def mcp_stub_answer(tool: str, reply: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Reply]:
    """A streamable-HTTP MCP endpoint taking stateless ``tools/call`` requests of ``tool``, as
    Exa's and Parallel's do: it refuses what such a server refuses (a client that accepts
    neither JSON nor event streams, a malformed request), and answers ``reply(arguments)`` as
    one ``message`` event, or as plain JSON when ``reply`` gives a ``("json", message)`` pair,
    or ``(status, body)`` as an HTTP error."""

    def answer(request: dict[str, Any]) -> Reply:
        accept = request["headers"].get("accept", "")
        if request["method"] != "POST" or "application/json" not in accept or "text/event-stream" not in accept:
            return (
                406,
                "application/json",
                json.dumps({"jsonrpc": "2.0", "error": {"code": -32000, "message": "Not Acceptable"}}),
            )
        body = request["body"]
        if not request["headers"].get("content-type", "").startswith("application/json") or not (
            isinstance(body, dict) and body.get("jsonrpc") == "2.0" and body.get("method") == "tools/call"
        ):
            return (
                400,
                "application/json",
                json.dumps({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}}),
            )
        if body["params"]["name"] != tool:
            message = {
                "jsonrpc": "2.0",
                "id": body["id"],
                "error": {"code": -32602, "message": f"Tool {body['params']['name']} not found"},
            }
            return 200, "text/event-stream", f"event: message\ndata: {json.dumps(message)}\n\n"
        out = reply(body["params"]["arguments"])
        if isinstance(out, tuple) and isinstance(out[0], int):
            return out[0], "application/json", json.dumps(out[1])
        if isinstance(out, tuple):
            return 200, "application/json", json.dumps(out[1])
        return 200, "text/event-stream", f"event: message\ndata: {json.dumps(out)}\n\n"

    return answer


EXA_CONTEXT = (
    "Title: What's New In Python 3.14\nURL: https://docs.python.org/3/whatsnew/3.14.html\n"
    "Published: 2025-10-07\nText: Python 3.14 was released on 7 October 2025."
)


@contextmanager
def serve(settings: Settings, monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[httpx.Client]:
    """A server started with exactly the switches ``env`` gives."""
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=60.0) as client:
        yield client


def tool_parts(client: httpx.Client, prompt: str, session_id: str | None = None) -> list[dict[str, Any]]:
    sid = session_id or create_session(client)["id"]
    response = client.post(f"/session/{sid}/message", json=text_prompt(prompt))
    assert response.status_code == 200, response.text
    return [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]


def search(*calls: dict[str, Any], forced: bool = False) -> str:
    return "\n".join(f"TOOL{'!' if forced else ''}:websearch {json.dumps(call)}" for call in calls)


def offered(client: httpx.Client, provider: str = "opensession", model: str = "echo") -> list[str]:
    return [t["id"] for t in client.get("/experimental/tool", params={"provider": provider, "model": model}).json()]


@SQLITE
def test_websearch_is_off_by_default_and_nothing_is_sent(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with search_stub(mcp_stub_answer("web_search_exa", lambda _a: mcp_result(EXA_CONTEXT))) as exa:
        with serve(settings, monkeypatch, OPENSESSION_EXA_URL=f"{exa.url}/mcp", EXA_API_KEY="key") as client:
            assert "websearch" in client.get("/experimental/tool/ids").json()  # listed, as in OpenCode
            assert "websearch" not in offered(client) and "websearch" not in offered(client, "openai", "gpt-5")
            assert tool_parts(client, search({"query": "news"})) == []  # not offered: the echo model cannot call it
            (forced,) = tool_parts(client, search({"query": "news"}, forced=True))
        assert forced["state"]["status"] == "error" and "not enabled" in forced["state"]["error"]
        assert exa.requests == []


@SQLITE
def test_exa_is_called_as_opencode_calls_it(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = {"python 3.14 release": EXA_CONTEXT, "nothing at all": ""}
    answer = mcp_stub_answer("web_search_exa", lambda args: mcp_result(replies[args["query"]]))
    with search_stub(answer) as exa:
        env = {"OPENCODE_ENABLE_EXA": "1", "OPENSESSION_EXA_URL": f"{exa.url}/mcp", "EXA_API_KEY": "k&y=1"}
        with serve(settings, monkeypatch, **env) as client:
            listed = client.get("/experimental/tool", params={"provider": "opensession", "model": "echo"}).json()
            sid = create_session(client)["id"]
            defaults, chosen, empty = tool_parts(
                client,
                search(
                    {"query": "python 3.14 release"},
                    {
                        "query": "python 3.14 release",
                        "numResults": 3,
                        "type": "deep",
                        "livecrawl": "preferred",
                        "contextMaxCharacters": 2000,
                    },
                    {"query": "nothing at all"},
                ),
                sid,
            )
    spec = next(t for t in listed if t["id"] == "websearch")
    assert spec["parameters"] == OPENCODE_WEBSEARCH_PARAMETERS
    assert f"The current year is {time.localtime().tm_year}." in spec["description"]
    assert defaults["state"]["status"] == "completed", defaults["state"]
    assert defaults["state"]["output"] == EXA_CONTEXT
    assert defaults["state"]["title"] == "Exa Web Search: python 3.14 release"
    assert defaults["state"]["metadata"] == {"provider": "exa"}
    assert chosen["state"]["output"] == EXA_CONTEXT
    assert empty["state"]["output"] == "No search results found. Please try a different query."
    first, second, _ = exa.requests
    assert first["path"] == "/mcp" and first["query"] == {"exaApiKey": ["k&y=1"]}
    assert first["headers"]["accept"] == "application/json, text/event-stream"
    assert first["body"] == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "web_search_exa",
            "arguments": {"query": "python 3.14 release", "type": "auto", "numResults": 8, "livecrawl": "fallback"},
        },
    }
    assert second["body"]["params"]["arguments"] == {
        "query": "python 3.14 release",
        "type": "deep",
        "numResults": 3,
        "livecrawl": "preferred",
        "contextMaxCharacters": 2000,
    }


# OpenCode 1.18.33's websearch parameters (GET /experimental/tool, OPENCODE_EXPERIMENTAL=1).
OPENCODE_WEBSEARCH_PARAMETERS = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Websearch query"},
        "numResults": {"type": "number", "description": "Number of search results to return (default: 8)"},
        "livecrawl": {
            "type": "string",
            "enum": ["fallback", "preferred"],
            "description": "Live crawl mode - 'fallback': use live crawling as backup if cached content "
            "unavailable, 'preferred': prioritize live crawling (default: 'fallback')",
        },
        "type": {
            "type": "string",
            "enum": ["auto", "fast", "deep"],
            "description": "Search type - 'auto': balanced search (default), 'fast': quick results, "
            "'deep': comprehensive search",
        },
        "contextMaxCharacters": {
            "type": "number",
            "description": "Maximum characters for context string optimized for LLMs (default: 10000)",
        },
    },
    "required": ["query"],
    "additionalProperties": False,  # opensession's schemas say so; OpenCode's leave it out
}


@SQLITE
def test_exa_failures_reach_the_model(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    def reply(args: dict[str, Any]) -> Any:
        query = args["query"]
        if query == "as json":
            return ("json", mcp_result(EXA_CONTEXT))
        if query == "rate limited":
            return mcp_result("Search error (429): You have exceeded the free rate limit", is_error=True)
        if query == "bad params":
            return {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Invalid arguments for tool"}}
        if query == "server error":
            return (500, {"error": "upstream unavailable"})
        time.sleep(3)
        return mcp_result(EXA_CONTEXT)

    monkeypatch.setattr("app.runtime.tools._websearch.TIMEOUT_SECONDS", 0.5)
    queries = ("as json", "rate limited", "bad params", "server error", "slow")
    with search_stub(mcp_stub_answer("web_search_exa", reply)) as exa:
        env = {"OPENCODE_EXPERIMENTAL": "1", "OPENSESSION_EXA_URL": f"{exa.url}/mcp"}
        with serve(settings, monkeypatch, **env) as client:
            as_json, limited, bad, failed, slow = tool_parts(client, search(*({"query": q} for q in queries)))
            (invalid,) = tool_parts(client, search({"query": "x", "type": "thorough"}))
    assert as_json["state"]["output"] == EXA_CONTEXT
    assert (
        limited["state"]["error"] == "Exa Web Search failed: Search error (429): You have exceeded the free rate limit"
    )
    assert bad["state"]["error"] == "Exa Web Search failed: Invalid arguments for tool"
    assert failed["state"]["error"] == "Exa Web Search failed with status code: 500: upstream unavailable"
    assert slow["state"]["error"] == "Exa Web Search request timed out after 0.5 seconds"
    assert invalid["state"]["error"] == "type must be one of auto, fast, deep"
    assert len(exa.requests) == 5  # the invalid call sent nothing


@SQLITE
def test_parallel_is_called_as_opencode_calls_it(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = mcp_stub_answer("web_search", lambda args: mcp_result(f"results for {args['objective']}"))
    with search_stub(answer) as parallel:
        env = {
            "OPENCODE_ENABLE_PARALLEL": "true",
            "OPENSESSION_PARALLEL_URL": f"{parallel.url}/mcp",
            "PARALLEL_API_KEY": "pk",
        }
        with serve(settings, monkeypatch, **env) as client:
            sid = create_session(client)["id"]
            (part,) = tool_parts(client, search({"query": "rust 2024 edition"}), sid)
    assert part["state"]["output"] == "results for rust 2024 edition"
    assert part["state"]["title"] == "Parallel Web Search: rust 2024 edition"
    assert part["state"]["metadata"] == {"provider": "parallel"}
    (request,) = parallel.requests
    assert request["headers"]["authorization"] == "Bearer pk"
    assert request["headers"]["user-agent"].startswith("opensession/")
    assert request["body"]["params"] == {
        "name": "web_search",
        "arguments": {
            "objective": "rust 2024 edition",
            "search_queries": ["rust 2024 edition"],
            "session_id": sid,
            "model_name": "echo",
        },
    }


SEARXNG_ANSWER = {
    "query": "python release",
    "number_of_results": 0,
    "results": [
        {
            "url": f"https://example.org/{n}",
            "title": f"Result {n}",
            "content": f"Snippet number {n}.",
            "engine": "duckduckgo",
            "parsed_url": ["https", "example.org", f"/{n}", "", "", ""],
            "template": "default.html",
            "engines": ["duckduckgo", "brave"],
            "positions": [n],
            "publishedDate": "2025-10-07T00:00:00" if n == 1 else None,
            "score": 2.0 / n,
            "category": "general",
        }
        for n in range(1, 11)
    ],
    "answers": [{"url": "https://www.python.org/", "template": "answer/legacy.html", "answer": "Python 3.14"}],
    "corrections": [],
    "infoboxes": [],
    "suggestions": ["python release schedule"],
    "unresponsive_engines": [["google", "timeout"]],
}


def searxng_answer(request: dict[str, Any]) -> Reply:
    """SearXNG's ``/search``: ``format=json`` where settings.yml lists it (403 otherwise, as SearXNG)."""
    if request["path"] != "/searx/search":
        return 404, "text/html", "<html>Not Found</html>"
    if request["query"].get("format") != ["json"]:
        return 403, "text/html", "<html>Forbidden</html>"
    query = request["query"]["q"][0]
    if query == "refused":
        return 403, "text/html", "<html>Forbidden</html>"  # json is not among its search.formats
    if query == "nothing":
        return 200, "application/json", json.dumps({**SEARXNG_ANSWER, "results": [], "answers": []})
    return 200, "application/json", json.dumps({**SEARXNG_ANSWER, "query": query})


@SQLITE
def test_searxng_is_a_self_hosted_backend(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with search_stub(searxng_answer) as searxng:
        env = {"OPENSESSION_WEBSEARCH": "searxng", "OPENSESSION_SEARXNG_URL": f"{searxng.url}/searx/"}
        with serve(settings, monkeypatch, **env) as client:
            assert "websearch" in offered(client) and "websearch" in offered(client, "openai", "gpt-5")
            two, cut, defaults, refused, nothing = tool_parts(
                client,
                search(
                    {"query": "python release", "numResults": 2},
                    {"query": "python release", "contextMaxCharacters": 40},
                    {"query": "python release"},
                    {"query": "refused"},
                    {"query": "nothing"},
                ),
            )
    assert two["state"]["title"] == "SearXNG Web Search: python release"
    assert two["state"]["metadata"] == {"provider": "searxng"}
    assert two["state"]["output"] == (
        "Answer: Python 3.14\nURL: https://www.python.org/\n\n"
        "Title: Result 1\nURL: https://example.org/1\nPublished Date: 2025-10-07T00:00:00\nText: Snippet number 1.\n\n"
        "Title: Result 2\nURL: https://example.org/2\nText: Snippet number 2."
    )
    assert cut["state"]["output"] == two["state"]["output"][:40]
    assert defaults["state"]["output"].count("Title: ") == 8  # OpenCode's default count
    assert refused["state"]["error"] == (
        "SearXNG refused the JSON format: list json under search.formats in its settings.yml"
    )
    assert nothing["state"]["output"] == (
        "No search results found. Please try a different query. Engines that did not answer: google (timeout)"
    )
    first = searxng.requests[0]
    assert first["method"] == "GET" and first["query"] == {"q": ["python release"], "format": ["json"]}


@SQLITE
def test_the_websearch_permission_holds(settings: Settings, monkeypatch: pytest.MonkeyPatch, project_dir: Path) -> None:
    config = {"permission": {"websearch": {"*": "allow", "*secret*": "deny"}}}
    (project_dir / "opencode.json").write_text(json.dumps(config))
    with search_stub(mcp_stub_answer("web_search_exa", lambda _a: mcp_result(EXA_CONTEXT))) as exa:
        env = {"OPENCODE_ENABLE_EXA": "1", "OPENSESSION_EXA_URL": f"{exa.url}/mcp"}
        with serve(settings, monkeypatch, **env) as client:
            denied, allowed = tool_parts(client, search({"query": "the secret plans"}, {"query": "weather"}))
            (project_dir / "opencode.json").write_text(json.dumps({"permission": {"websearch": "deny"}}))
            assert tool_parts(client, search({"query": "weather"})) == []  # denied outright: not offered
    assert denied["state"]["status"] == "error" and "rule" in denied["state"]["error"]
    assert allowed["state"]["output"] == EXA_CONTEXT
    assert [r["body"]["params"]["arguments"]["query"] for r in exa.requests] == ["weather"]


@SQLITE
def test_opencode_s_providers_are_offered_websearch_without_a_switch(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(settings, monkeypatch) as client:
        assert "websearch" in offered(client, "opencode", "big-pickle")
        assert "websearch" in offered(client, "opencode-go", "kimi-k2")
        assert "websearch" not in offered(client, "anthropic", "claude-sonnet-4-5")


def test_the_switches_are_read_as_opencode_reads_them() -> None:
    assert ToolSettings.from_environ({}) == ToolSettings()
    assert not ToolSettings().websearch_offered("openai")
    for name in ("OPENCODE_EXPERIMENTAL", "OPENCODE_ENABLE_EXA", "OPENCODE_EXPERIMENTAL_EXA"):
        for value in ("1", "true", "TRUE", "yes"):
            settings = ToolSettings.from_environ({name: value})
            assert settings.websearch_offered("openai") and settings.websearch_backend("ses_b") == "exa", name
        assert not ToolSettings.from_environ({name: "0"}).websearch_offered("openai")
    for name in ("OPENCODE_ENABLE_PARALLEL", "OPENCODE_EXPERIMENTAL_PARALLEL"):
        settings = ToolSettings.from_environ({name: "1", "OPENCODE_ENABLE_EXA": "1"})
        assert settings.websearch_offered("openai") and settings.websearch_backend("ses_a") == "parallel"
    pinned = ToolSettings.from_environ({"OPENCODE_WEBSEARCH_PROVIDER": "parallel"})
    assert not pinned.websearch_offered("openai")  # it pins the backend, it does not enable the tool
    assert pinned.websearch_backend("ses_a") == "parallel"
    ours = ToolSettings.from_environ({"OPENSESSION_WEBSEARCH": "exa", "OPENCODE_WEBSEARCH_PROVIDER": "parallel"})
    assert ours.websearch_offered("openai") and ours.websearch_backend("ses_b") == "exa"
    # Without a pin, OpenCode splits sessions by a hash of their id; these were computed with
    # OpenCode 1.18.33's own function (its ``checksum``, FNV-1a in base 36).
    split = {"ses_a": "exa", "ses_b": "parallel", "ses_c": "exa", "ses_d": "parallel"}
    split |= {"ses_3f1c0b2a7ffeN9kq4YbXcTzR1m": "exa", "ses_3f1c0b2a7ffeN9kq4YbXcTzR1n": "parallel"}
    assert {sid: ToolSettings().websearch_backend(sid) for sid in split} == split
    assert not ToolSettings.from_environ({"OPENCODE_CLIENT": "sdk"}).question
    assert ToolSettings.from_environ({"OPENCODE_CLIENT": "sdk", "OPENCODE_ENABLE_QUESTION_TOOL": "1"}).question
    assert ToolSettings.from_environ({"OPENCODE_CLIENT": "desktop"}).question
    with pytest.raises(ValueError, match="OPENSESSION_WEBSEARCH must be one of exa, parallel, searxng"):
        ToolSettings.from_environ({"OPENSESSION_WEBSEARCH": "google"})
    with pytest.raises(ValueError, match="OPENSESSION_SEARXNG_URL"):
        ToolSettings.from_environ({"OPENSESSION_WEBSEARCH": "searxng"})
