"""``PATCH /config`` (the project's opencode.json) and ``PATCH /global/config`` (the user's), which
the OpenCode app and TUI use for their settings.

A patch is merged into the file as written: comments, layout and ``{env:...}`` / ``{file:...}``
tokens stay, and a secret a token stands for is never written back. ``null`` removes a key,
unknown keys are dropped, a value of the wrong type is a 400 naming it, and a file that is not
valid JSONC is refused (400) rather than overwritten. Writes are atomic (a new file renamed over
the old, its mode and a symlink kept) and serialized (concurrent patches all land)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config_edit import apply_patch, parse
from tests.servers import ThreadServer
from tests.sse import EventCollector

SECRET = "s3cret-value-never-written"
PROJECT_FILE = """{
  // the team's settings
  "$schema": "https://opencode.ai/config.json",
  "provider": {
    "local": {
      "options": { "baseURL": "http://127.0.0.1:9/v1", "apiKey": "{env:OPENSESSION_TEST_KEY}" },
      "models": { "m": {} }, /* kept */
    },
  },
  "instructions": ["{file:./rules.md}"],
}
"""


@pytest.mark.parametrize(
    ("text", "patch", "expected"),
    [
        ("{}", {"a": 1}, '{\n  "a": 1\n}'),
        ('{ "a": 1 }', {"b": [1, 2]}, '{ "a": 1, "b": [1, 2] }'),
        ('{\n  "a": 1,\n  "b": 2\n}', {"a": None}, '{\n  "b": 2\n}'),
        ('{\n  "a": 1,\n  "b": 2\n}', {"b": None}, '{\n  "a": 1\n}'),
        ('{\n  "a": 1, // one\n}', {"c": "x"}, '{\n  "a": 1,\n  "c": "x" // one\n}'),
        ('{\n  "a": "ask"\n}', {"a": {"bash": "deny"}}, '{\n  "a": {\n    "bash": "deny"\n  }\n}'),
        ('{\n  "p": {\n    "q": 1\n  }\n}', {"p": {"r": {"s": None, "t": 1}}}, None),
        ('{"s": "a, }", "t": [1]}', {"t": [2], "u": None}, '{"s": "a, }", "t": [2]}'),
        ("\ufeff{ /* only a comment */ }", {"z": "é"}, None),
        ('{\n  "k": {}\n}', {"k": {}}, '{\n  "k": {}\n}'),
    ],
)
def test_a_patch_is_merged_into_the_text(text: str, patch: dict, expected: str | None) -> None:
    merged = apply_patch(text, patch)
    if expected is not None:
        assert merged == expected
    value = parse(merged)
    for key, wanted in patch.items():
        if wanted is None:
            assert key not in value
        elif not isinstance(wanted, dict):
            assert value[key] == wanted


def _write_project(project_dir: Path) -> Path:
    path = project_dir / "opencode.jsonc"
    path.write_text(PROJECT_FILE)
    (project_dir / "rules.md").write_text("be brief\n")
    path.chmod(0o600)
    return path


def test_the_project_file_keeps_comments_tokens_and_mode(
    server: ThreadServer, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENSESSION_TEST_KEY", SECRET)
    path = _write_project(project_dir)
    inode = path.stat().st_ino
    with EventCollector(f"{server.url}/global/event") as events:
        response = client.patch("/config", json={"username": "alice", "provider": {"local": {"name": "Local"}}})
        assert response.status_code == 200, response.text
        frame = events.wait_for(lambda f: f.type == "server.instance.disposed")
        assert frame.properties == {"directory": str(project_dir)}
    text = path.read_text()
    assert SECRET not in text and SECRET not in response.text
    assert "// the team's settings" in text and "/* kept */" in text
    assert '"apiKey": "{env:OPENSESSION_TEST_KEY}"' in text and '"{file:./rules.md}"' in text
    content = response.json()
    assert content["username"] == "alice" and content["provider"]["local"]["name"] == "Local"
    assert content["provider"]["local"]["options"]["apiKey"] == "{env:OPENSESSION_TEST_KEY}"
    assert parse(text) == content
    assert path.stat().st_ino != inode and oct(path.stat().st_mode & 0o777) == oct(0o600)  # renamed over
    assert [p.name for p in project_dir.iterdir() if p.name.endswith(".tmp")] == []
    assert client.get("/config").json()["username"] == "alice"

    assert client.patch("/config", json={"username": None}).json().get("username") is None
    assert "username" not in path.read_text()
    unknown = client.patch("/config", json={"notAKey": 1, "share": "manual"})
    assert unknown.status_code == 200 and "notAKey" not in unknown.json() and "notAKey" not in path.read_text()


def test_which_file_a_project_patch_writes(client: httpx.Client, project_dir: Path) -> None:
    assert client.patch("/config", json={"model": "a/b"}).status_code == 200
    created = project_dir / "opencode.json"
    assert parse(created.read_text()) == {"$schema": "https://opencode.ai/config.json", "model": "a/b"}
    (project_dir / ".opencode").mkdir()
    override = project_dir / ".opencode" / "opencode.json"
    override.write_text('{"model": "c/d"}')
    assert client.patch("/config", json={"model": "e/f"}).json() == {"model": "e/f"}  # the file that wins
    assert parse(created.read_text())["model"] == "a/b"
    assert client.get("/config").json()["model"] == "e/f"


def test_bodies_and_files_that_cannot_be_merged_are_400s(client: httpx.Client, project_dir: Path) -> None:
    path = project_dir / "opencode.json"
    path.write_text('{"model": "a/b",')  # broken by hand
    refused = client.patch("/config", json={"username": "x"})
    assert refused.status_code == 400 and refused.json()["name"] == "ConfigInvalidError"
    assert str(path) in refused.json()["data"]["message"]
    assert path.read_text() == '{"model": "a/b",'
    path.write_text("{}")
    for body, key in (
        ({"model": 5}, "model"),
        ({"share": "sometimes"}, "share"),
        ({"snapshot": "true"}, "snapshot"),
        ({"provider": {"x": "not an object"}}, "provider"),
        ({"instructions": "one"}, "instructions"),
        ({"subagent_depth": -1}, "subagent_depth"),
    ):
        response = client.patch("/config", json=body)
        assert response.status_code == 400, body
        assert response.json()["name"] == "BadRequest" and key in response.json()["data"]["message"]
    for raw in (b"[]", b'"x"', b"{", b""):
        response = client.patch("/config", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["data"]["message"], raw
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    bodies: tuple[dict[str, Any], ...] = (
        {"agent": {"a": {"x": deep}}},
        {"provider": {"p": {"options": {"o": {"x": deep}}}}},
    )
    for body in bodies:
        too_deep = client.patch("/config", json=body)  # not a RecursionError's 500
        assert too_deep.status_code == 400 and "levels deep" in too_deep.json()["data"]["message"]
    for raw in (b'{"experimental": {"x": 1e400}}', b'{"experimental": {"x": 123456789012345678901234567890}}'):
        unstorable = client.patch("/config", content=raw, headers={"content-type": "application/json"})
        assert unstorable.status_code == 400 and unstorable.json()["data"]["message"], raw
        assert path.read_text() == "{}"  # nothing written that JSONC readers or the answers refuse
    path.write_text('{"a": ' + "[" * 300 + "]" * 300 + "}")
    deep_file = client.patch("/config", json={"username": "x"})
    assert deep_file.status_code == 400 and deep_file.json()["name"] == "ConfigInvalidError"
    path.write_text("{}")
    missing = client.patch("/config", params={"directory": str(project_dir / "nowhere")}, json={"model": "a/b"})
    assert missing.status_code == 400 and "nowhere" in missing.json()["data"]["message"]
    assert path.read_text() == "{}"


def test_concurrent_patches_all_land(client: httpx.Client, project_dir: Path) -> None:
    keys = [f"agent{n}" for n in range(12)]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda k: client.patch("/config", json={"agent": {k: {"model": "a/b"}}}), keys))
    assert all(a.status_code == 200 for a in answers)
    assert sorted(parse((project_dir / "opencode.json").read_text())["agent"]) == sorted(keys)


def test_the_global_file(server: ThreadServer, client: httpx.Client, config_dir: Path, tmp_path: Path) -> None:
    with EventCollector(f"{server.url}/global/event") as events:
        first = client.patch("/global/config", json={"username": "bob", "shell": "/bin/zsh"})
        assert first.status_code == 200, first.text
        events.wait_for(lambda f: f.type == "global.disposed")
    created = config_dir / "opencode.jsonc"  # none existed: OpenCode's default name
    assert first.json() == {"$schema": "https://opencode.ai/config.json", "username": "bob", "shell": "/bin/zsh"}
    assert client.get("/global/config").json()["username"] == "bob"
    assert "shell" not in client.patch("/global/config", json={"shell": ""}).json()  # the app's "default"
    assert "shell" not in parse(created.read_text())

    created.unlink()
    real = tmp_path / "dotfiles" / "opencode.json"
    real.parent.mkdir()
    real.write_text('{\n  // mine\n  "theme": "dark"\n}\n')
    (config_dir / "opencode.json").symlink_to(real)
    assert client.patch("/global/config", json={"username": "carol"}).json()["username"] == "carol"
    assert (config_dir / "opencode.json").is_symlink() and "// mine" in real.read_text()
    assert parse(real.read_text()) == {"theme": "dark", "username": "carol"}
    assert os.listdir(real.parent) == ["opencode.json"]
