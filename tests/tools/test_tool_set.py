"""Which tools there are and which a model is offered, as OpenCode 1.18 decides: the listings
(``/experimental/tool/ids``, ``/experimental/tool``) for the same switches, what each built-in
agent's model gets in a real turn, and the retired ``list``/``todoread``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.helpers import create_session, text_prompt
from tests.servers import openai_stub
from tests.tools.test_websearch import serve

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# Observed on OpenCode 1.18.33 (`opencode serve`, the opencode.json of
# ../shared/tools/run_opencode.sh: a custom openai-compatible provider "mock", no plugins, no
# .opencode/tool files), with no OPENCODE_* switch set.
OPENCODE_IDS = [
    "invalid",
    "question",
    "bash",
    "read",
    "glob",
    "grep",
    "edit",
    "write",
    "task",
    "webfetch",
    "todowrite",
    "websearch",
    "skill",
    "apply_patch",
]
# ... its GET /experimental/tool?provider=mock&model=mock-model, and with model=gpt-5.
OPENCODE_MOCK_MODEL = ["invalid", "question", "bash", "read", "glob", "grep", "edit", "write"]
OPENCODE_MOCK_MODEL += ["task", "webfetch", "todowrite", "skill"]
OPENCODE_GPT5 = ["invalid", "question", "bash", "read", "glob", "grep", "task", "webfetch", "todowrite"]
OPENCODE_GPT5 += ["skill", "apply_patch"]
# ... and with OPENCODE_CLIENT=sdk OPENCODE_ENABLE_EXA=1: no question (no one to answer it), websearch.
OPENCODE_SDK_EXA_IDS = [i for i in OPENCODE_IDS if i != "question"]
OPENCODE_SDK_EXA_MOCK_MODEL = ["invalid", "bash", "read", "glob", "grep", "edit", "write", "task"]
OPENCODE_SDK_EXA_MOCK_MODEL += ["webfetch", "todowrite", "websearch", "skill"]
# With OPENCODE_EXPERIMENTAL=1 OpenCode 1.18.33 lists OPENCODE_IDS + ["execute", "lsp",
# "plan_exit"]: those three are not hosted here, so opensession lists OPENCODE_IDS.


def listed(client: httpx.Client, provider: str, model: str) -> list[str]:
    return [t["id"] for t in client.get("/experimental/tool", params={"provider": provider, "model": model}).json()]


def test_the_listings_are_opencode_s(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(settings, monkeypatch) as client:
        assert client.get("/experimental/tool/ids").json() == OPENCODE_IDS
        assert listed(client, "mock", "mock-model") == OPENCODE_MOCK_MODEL
        assert listed(client, "mock", "gpt-5") == OPENCODE_GPT5
    with serve(settings, monkeypatch, OPENCODE_CLIENT="sdk", OPENCODE_ENABLE_EXA="1") as client:
        assert client.get("/experimental/tool/ids").json() == OPENCODE_SDK_EXA_IDS
        assert listed(client, "mock", "mock-model") == OPENCODE_SDK_EXA_MOCK_MODEL
    with serve(settings, monkeypatch, OPENCODE_EXPERIMENTAL_LSP_TOOL="1") as client:
        assert client.get("/experimental/tool/ids").json() == [*OPENCODE_IDS, "lsp"]  # as OpenCode lists them
    with serve(settings, monkeypatch, OPENCODE_EXPERIMENTAL="1") as client:
        # OpenCode lists "execute", "lsp", "plan_exit" after apply_patch: only lsp is hosted here.
        assert client.get("/experimental/tool/ids").json() == [*OPENCODE_IDS, "lsp"]


def _offered_by_agent(
    client: httpx.Client, project_dir: Path, agents: list[str], **config: Any
) -> dict[str, list[str]]:
    """The tool names each agent's model is sent in a real turn (a stub OpenAI-compatible model)."""
    with openai_stub() as stub:
        provider = {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": stub.url}, "models": {"m": {}}}
        (project_dir / "opencode.json").write_text(
            json.dumps({"model": "stub/m", "provider": {"stub": provider}, **config})
        )
        for agent in agents:
            sid = create_session(client)["id"]
            response = client.post(f"/session/{sid}/message", json=text_prompt("hello", agent=agent))
            assert response.status_code == 200, response.text
        turns = stub.server.chat()
    assert len(turns) == len(agents)
    return {agent: [t["function"]["name"] for t in turn["tools"]] for agent, turn in zip(agents, turns, strict=True)}


def test_each_agent_is_offered_what_opencode_offers_it(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, project_dir: Path
) -> None:
    """OpenCode 1.18's agents deny ``question`` to all but build and plan, and ``todowrite`` to
    general; an agent a project declares gets ``question`` when its permission allows it."""
    agents = {"docs": {"description": "Writes docs"}, "asker": {"permission": {"question": "allow"}}}
    with serve(settings, monkeypatch) as client:
        offered = _offered_by_agent(client, project_dir, ["build", "plan", "general", "docs", "asker"], agent=agents)
    everything = ["question", "bash", "read", "glob", "grep", "edit", "write", "task", "webfetch", "todowrite", "skill"]
    assert offered["build"] == everything  # OpenCode's order; no list, todoread, websearch or invalid
    assert offered["plan"] == [t for t in everything if t not in ("edit", "write")]
    assert offered["general"] == [t for t in everything if t not in ("question", "todowrite")]
    assert offered["docs"] == [t for t in everything if t != "question"]
    assert offered["asker"] == everything


def test_a_client_that_cannot_answer_questions_is_not_offered_question(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, project_dir: Path
) -> None:
    with serve(settings, monkeypatch, OPENCODE_CLIENT="sdk") as client:
        offered = _offered_by_agent(client, project_dir, ["build"])
    assert "question" not in offered["build"] and "todowrite" in offered["build"]


def test_retired_tools_run_when_called_by_name_under_their_own_permission(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, project_dir: Path
) -> None:
    (project_dir / "notes.txt").write_text("hi\n")
    with serve(settings, monkeypatch) as client:
        sid = create_session(client)["id"]
        prompt = "TOOL:list {}\nTOOL:todoread {}"  # offered to no model: the echo model makes no call
        assert client.post(f"/session/{sid}/message", json=text_prompt(prompt)).status_code == 200
        forced = "TOOL!:list {}\nTOOL!:todoread {}"
        assert client.post(f"/session/{sid}/message", json=text_prompt(forced)).status_code == 200
        (project_dir / "opencode.json").write_text(json.dumps({"permission": {"list": "deny", "todoread": "deny"}}))
        assert client.post(f"/session/{sid}/message", json=text_prompt(forced)).status_code == 200
        parts = [p for m in client.get(f"/session/{sid}/message").json() for p in m["parts"] if p["type"] == "tool"]
    listing, todos, denied_listing, denied_todos = parts
    assert listing["tool"] == "list" and "notes.txt" in listing["state"]["output"]
    assert todos["tool"] == "todoread" and todos["state"]["output"] == "[]"
    assert denied_listing["state"]["status"] == "error" and "rule" in denied_listing["state"]["error"]
    assert denied_todos["state"]["status"] == "error" and "rule" in denied_todos["state"]["error"]
