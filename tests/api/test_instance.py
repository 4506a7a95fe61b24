"""Instance routes outside sessions: the projects the server knows (``/project``,
``/project/current``) and the user's own configuration (``/global/config``)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.helpers import git_repository


def test_projects_are_the_servers_and_those_its_sessions_are_in(
    client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    """``GET /project``: the request's project first, then one per project the sessions are in
    (its worktree the first directory seen, updated with its latest session), as ``/project/current``
    shapes them. Two directories of one repository are one project."""
    current = client.get("/project/current").json()
    assert client.get("/project").json() == [current]

    (tmp_path / "repo").mkdir()
    repo = git_repository(tmp_path / "repo")
    (repo / "sub").mkdir()
    assert client.post("/session", params={"directory": str(repo / "sub")}).status_code == 200
    latest = client.post("/session", params={"directory": str(repo)}).json()
    listed = client.get("/project").json()
    assert [p["id"] for p in listed] == [current["id"], latest["projectID"]]
    assert latest["projectID"] not in ("global", current["id"])
    repo_project = listed[1]
    assert repo_project["worktree"] == str(repo) and repo_project["vcs"] == "git"
    assert repo_project["time"]["updated"] == latest["time"]["updated"]
    assert set(repo_project) == set(current) == {"id", "worktree", "vcs", "time", "sandboxes"}


def test_global_config_is_the_users_own_configuration(
    client: httpx.Client, project_dir: Path, config_dir: Path
) -> None:
    """``GET /global/config``: only what the user's config directory holds (JSONC allowed), with
    the schema, never the project's settings; ``GET /config`` merges both."""
    schema = "https://opencode.ai/config.json"
    assert client.get("/global/config").json() == {"$schema": schema}
    (config_dir / "opencode.jsonc").write_text('{\n  // mine\n  "username": "me",\n}\n')
    (project_dir / "opencode.json").write_text(json.dumps({"snapshot": False}))
    assert client.get("/global/config").json() == {"$schema": schema, "username": "me"}
    merged = client.get("/config").json()
    assert merged["username"] == "me" and merged["snapshot"] is False
