"""Tools and listings beyond the core set, through a real server: the ``invalid`` repair of
unknown tool calls, skills, apply_patch, webfetch, tool listings and ignored plugins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import create_session, text_prompt

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
