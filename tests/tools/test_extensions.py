"""Tools and listings beyond the core set, through a real server: the ``invalid`` repair of
unknown tool calls, skills, apply_patch, webfetch, tool listings and ignored plugins."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer, openai_stub, thread_server
from tests.sse import EventCollector

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _tool_parts(client: httpx.Client, sid: str) -> list[dict[str, Any]]:
    return [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]


def _run(client: httpx.Client, prompt: str) -> list[dict[str, Any]]:
    sid = create_session(client)["id"]
    response = client.post(f"/session/{sid}/message", json=text_prompt(prompt))
    assert response.status_code == 200, response.text
    return _tool_parts(client, sid)


def test_unknown_tool_goes_to_invalid_and_miscased_names_are_repaired(client: httpx.Client, project_dir: Path) -> None:
    (project_dir / "notes.txt").write_text("hello\n")
    unknown, miscased, garbled = _run(
        client, 'TOOL!:frobnicate {"x": 1}\nTOOL!:Read {"filePath": "notes.txt"}\nTOOL!:glob {not json'
    )
    assert unknown["tool"] == "invalid" and unknown["state"]["status"] == "completed"
    assert unknown["state"]["input"]["tool"] == "frobnicate"
    assert unknown["state"]["title"] == "Invalid Tool"
    assert unknown["state"]["output"].startswith(
        "The arguments provided to the tool are invalid: Model tried to call unavailable tool 'frobnicate'."
    )
    assert "invalid" not in unknown["state"]["output"].split("Available tools:")[1]
    assert miscased["tool"] == "read" and "hello" in miscased["state"]["output"]
    assert garbled["tool"] == "invalid" and garbled["state"]["input"]["tool"] == "glob"
    assert "Invalid input for tool glob" in garbled["state"]["output"]


def _skill(root: Path, folder: str, name: str, description: str, body: str) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}")
    return path


def test_skills_are_listed_offered_and_loaded(client: httpx.Client, project_dir: Path, config_dir: Path) -> None:
    pdf = _skill(project_dir, ".opencode/skill/pdf-tools", "pdf-tools", "Use when working with PDF files.", "\n# PDF\n")
    (pdf.parent / "scripts").mkdir()
    (pdf.parent / "scripts" / "merge.sh").write_text("echo merge\n")
    mine = _skill(config_dir, "skills/nested/mine", "mine", "The user's own skill.", "Do it my way.\n")
    (project_dir / ".opencode" / "skills" / "broken").mkdir(parents=True)
    (project_dir / ".opencode" / "skills" / "broken" / "SKILL.md").write_text("---\nname: broken\n---\nno description")

    listed = client.get("/skill").json()
    assert sorted(listed, key=lambda s: s["name"]) == [
        {"name": "mine", "description": "The user's own skill.", "location": str(mine), "content": "Do it my way.\n"},
        {
            "name": "pdf-tools",
            "description": "Use when working with PDF files.",
            "location": str(pdf),
            "content": "\n# PDF\n",
        },
    ]
    v2 = client.get("/api/skill", params={"location[directory]": str(project_dir)}).json()
    assert v2["location"]["directory"] == str(project_dir)
    assert sorted(s["name"] for s in v2["data"]) == ["mine", "pdf-tools"]

    loaded, missing = _run(client, 'TOOL:skill {"name": "pdf-tools"}\nTOOL:skill {"name": "nope"}')
    output = loaded["state"]["output"]
    assert loaded["state"]["title"] == "Loaded skill: pdf-tools"
    assert output.startswith('<skill_content name="pdf-tools">\n# Skill: pdf-tools\n\n# PDF\n\n')
    assert f"Base directory for this skill: {pdf.parent.as_uri()}\n" in output
    assert f"<skill_files>\n<file>{pdf.parent / 'scripts' / 'merge.sh'}</file>\n</skill_files>" in output
    assert missing["state"]["error"] == 'Skill "nope" not found. Available skills: mine, pdf-tools'


def test_apply_patch_through_a_turn_announces_the_edited_file(
    server: ThreadServer, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "a.txt").write_text("one\ntwo\n")
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-two\n+TWO\n*** End Patch"
    with EventCollector(f"{server.url}/event") as events:
        (part,) = _run(client, "TOOL!:apply_patch " + json.dumps({"patchText": patch}))
        edited = events.wait_for(lambda f: f.type == "file.edited")
    assert part["state"]["status"] == "completed", part["state"]
    assert part["state"]["output"] == "Success. Updated the following files:\nM a.txt"
    assert edited.properties["file"] == str(project_dir / "a.txt")
    assert (project_dir / "a.txt").read_text() == "one\nTWO\n"


@pytest.fixture
def web() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving a few pages."""
    pages = {
        "/page": ("text/html; charset=utf-8", HTML.encode()),
        "/plain": ("text/plain", b"just text"),
        "/huge": ("text/plain", b"x" * (6 * 1024 * 1024)),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/slow":
                time.sleep(3)
            kind, body = pages.get(self.path, ("text/plain", b"missing"))
            self.send_response(200 if self.path in pages or self.path == "/slow" else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (a limit)
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


HTML = """<html><head><title>T</title><style>p{color:red}</style><script>alert(1)</script></head>
<body><h1>Heading</h1><p>Some <b>bold</b> text and a <a href="https://example.com">link</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""


def test_webfetch_converts_html_and_enforces_its_limits(client: httpx.Client, web: str) -> None:
    calls = [
        {"url": f"{web}/page"},
        {"url": f"{web}/page", "format": "text"},
        {"url": f"{web}/page", "format": "html"},
        {"url": f"{web}/plain", "format": "markdown"},
        {"url": f"{web}/nothing"},
        {"url": f"{web}/huge"},
        {"url": f"{web}/slow", "timeout": 0.5},
        {"url": "file:///etc/passwd"},
    ]
    markdown, text, html, plain, missing, huge, slow, scheme = _run(
        client, "\n".join("TOOL:webfetch " + json.dumps(call) for call in calls)
    )
    assert markdown["state"]["title"] == f"{web}/page (text/html; charset=utf-8)"
    output = markdown["state"]["output"]
    assert "\n# Heading\n" in output and "**bold**" in output and "[link](https://example.com)" in output
    assert "- one" in output and "alert" not in output and "color:red" not in output
    assert "Heading" in text["state"]["output"] and "<" not in text["state"]["output"]
    assert "alert" not in text["state"]["output"]
    assert html["state"]["output"] == HTML
    assert plain["state"]["output"] == "just text"
    assert missing["state"]["error"] == "Request failed with status code: 404"
    assert huge["state"]["error"] == "Response too large (exceeds 5MB limit)"
    assert slow["state"]["error"] == "Request timed out after 0.5 seconds"
    assert scheme["state"]["error"] == "URL must start with http:// or https://"


def test_webfetch_asks_the_webfetch_permission(client: httpx.Client, project_dir: Path, web: str) -> None:
    (project_dir / "opencode.json").write_text(json.dumps({"permission": {"webfetch": "deny"}}))
    (part,) = _run(client, "TOOL!:webfetch " + json.dumps({"url": f"{web}/page"}))
    assert part["state"]["status"] == "error" and "rule" in part["state"]["error"]


def test_tool_listings_follow_the_model(client: httpx.Client) -> None:
    ids = client.get("/experimental/tool/ids").json()
    assert {"invalid", "bash", "read", "edit", "write", "apply_patch", "webfetch", "skill", "task"} <= set(ids)
    echo = client.get("/experimental/tool", params={"provider": "opensession", "model": "echo"}).json()
    gpt = client.get("/experimental/tool", params={"provider": "openai", "model": "gpt-5"}).json()
    assert echo[0]["id"] == "invalid" and echo[0]["description"] == "Do not use"
    assert {"edit", "write"} <= {t["id"] for t in echo} and "apply_patch" not in {t["id"] for t in echo}
    assert "apply_patch" in {t["id"] for t in gpt} and not {"edit", "write"} & {t["id"] for t in gpt}
    fetch = next(t for t in gpt if t["id"] == "webfetch")["parameters"]
    assert fetch["$schema"] == "https://json-schema.org/draft/2020-12/schema" and fetch["required"] == ["url"]
    assert fetch["properties"]["format"]["enum"] == ["text", "markdown", "html"]
    assert client.get("/experimental/tool", params={"provider": "openai"}).status_code == 400


def test_v2_metadata_lists_agents_commands_models_providers_and_references(
    client: httpx.Client, project_dir: Path
) -> None:
    config = {
        "model": "local/coder",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Local",
                "options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "secret"},
                "models": {"coder": {"name": "Coder", "limit": {"context": 1000, "output": 100}}},
            }
        },
        "command": {"hi": {"template": "Say hi $ARGUMENTS", "model": "local/coder", "subtask": True}},
        "references": {"docs": {"path": "../docs", "description": "The docs"}, "sdk": "owner/sdk"},
    }
    (project_dir / "opencode.json").write_text(json.dumps(config))
    where = {"location[directory]": str(project_dir)}

    def data(path: str) -> Any:
        body = client.get(path, params=where).json()
        assert body["location"]["directory"] == str(project_dir), body
        return body["data"]

    agents = {a["id"]: a for a in data("/api/agent")}
    assert agents["build"]["mode"] == "primary" and agents["build"]["hidden"] is False
    assert agents["build"]["request"] == {"headers": {}, "body": {}}
    assert {"action": "edit", "resource": "*", "effect": "deny"} in agents["plan"]["permissions"]
    commands = {c["name"]: c for c in data("/api/command")}
    assert commands["init"]["template"] and commands["init"]["description"] == "guided AGENTS.md setup"
    assert "source" not in commands["init"] and "hints" not in commands["init"]
    assert commands["hi"] == {
        "name": "hi",
        "template": "Say hi $ARGUMENTS",
        "subtask": True,
        "model": {"id": "coder", "providerID": "local"},
    }
    coder = next(m for m in data("/api/model") if m["id"] == "coder")
    assert coder["providerID"] == "local" and coder["limit"] == {"context": 1000, "output": 100}
    assert coder["api"] == {
        "id": "coder",
        "type": "aisdk",
        "package": "@ai-sdk/openai-compatible",
        "url": "http://127.0.0.1:9/v1",
    }
    assert coder["cost"] == [{"input": 0, "output": 0, "cache": {"read": 0, "write": 0}}]
    providers = {p["id"]: p for p in data("/api/provider")}
    assert providers["local"] == {
        "id": "local",
        "name": "Local",
        "api": {"type": "aisdk", "package": "@ai-sdk/openai-compatible", "url": "http://127.0.0.1:9/v1"},
        "request": {"headers": {}, "body": {}},
    }
    assert "secret" not in json.dumps(providers)
    assert data("/api/provider/local") == providers["local"]
    missing = client.get("/api/provider/nope", params=where)
    assert missing.status_code == 404
    assert missing.json() == {
        "_tag": "ProviderNotFoundError",
        "message": "Provider not found: nope",
        "providerID": "nope",
    }
    assert data("/api/reference") == [
        {
            "name": "docs",
            "path": str(project_dir.parent / "docs"),
            "description": "The docs",
            "source": {"type": "local", "path": "../docs", "description": "The docs"},
        },
        {"name": "sdk", "path": "owner/sdk", "source": {"type": "git", "repository": "owner/sdk"}},
    ]


def test_plugins_are_named_as_ignored_at_start_and_never_fail(
    settings: Settings, project_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugins = ["opencode-gemini-auth", "./local-plugin.ts", ["opencode-bar", {"option": "value"}]]
    (project_dir / "opencode.json").write_text(json.dumps({"plugin": plugins}))
    with caplog.at_level(logging.WARNING, logger="opensession.config"), thread_server(settings) as handle:
        warnings = [r.getMessage() for r in caplog.records if "plugin" in r.getMessage()]
        assert len(warnings) == 1
        assert "opencode-gemini-auth, ./local-plugin.ts, opencode-bar" in warnings[0]
        assert "JavaScript plugins cannot run" in warnings[0]
        with httpx.Client(base_url=handle.url) as client:
            assert client.get("/config").json()["plugin"] == plugins
            assert create_session(client)["id"]
    assert len([r for r in caplog.records if "plugin" in r.getMessage()]) == 1  # said once


def test_a_gpt_model_is_offered_apply_patch_and_told_its_skills(client: httpx.Client, project_dir: Path) -> None:
    skill = _skill(project_dir, ".opencode/skills/pdf", "pdf", "Use for PDFs.", "Body\n")
    _skill(project_dir, ".opencode/skills/secret", "secret", "Not for this agent.", "Hidden\n")
    with openai_stub() as stub:
        config = {
            "model": "stub/gpt-5",
            "provider": {
                "stub": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": stub.url}, "models": {"gpt-5": {}}}
            },
            "permission": {"skill": {"secret": "deny"}},
        }
        (project_dir / "opencode.json").write_text(json.dumps(config))
        sid = create_session(client)["id"]
        assert client.post(f"/session/{sid}/message", json=text_prompt("hello")).status_code == 200
        (turn,) = [r for r in stub.requests if "title generator" not in r["messages"][0]["content"]]
    offered = {t["function"]["name"] for t in turn["tools"]}
    assert {"apply_patch", "skill", "webfetch"} <= offered and not {"edit", "write", "invalid"} & offered
    system = "\n".join(m["content"] for m in turn["messages"] if m["role"] == "system")
    assert "Use the skill tool to load a skill when a task matches its description." in system
    assert (
        f"  <skill>\n    <name>pdf</name>\n    <description>Use for PDFs.</description>\n"
        f"    <location>{skill.as_uri()}</location>\n  </skill>"
    ) in system
    assert "secret" not in system
