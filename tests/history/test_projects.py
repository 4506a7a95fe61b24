"""``PATCH /project/:id`` and ``POST /project/git/init``, as the OpenCode web app uses them: it gives
every project an icon colour (and asks again on every load until one is kept), renames projects,
and makes a folder it opens that is no repository yet into one.

What OpenCode's server does, and this one too: a project's ``name``, and each key given of its
``icon`` and ``commands``, are kept (the others stay; ``null`` and unknown keys change nothing),
``GET /project`` and ``/project/current`` show them (after a restart too), ``project.updated``
announces the project on ``/global/event``; an unknown project is a 404
``ProjectNotFoundError``, a body of the wrong shape a 400 naming the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.settings import Settings
from tests.helpers import create_session, git_repository
from tests.servers import ThreadServer, thread_server
from tests.sse import EventCollector


def _current(client: httpx.Client) -> dict:
    response = client.get("/project/current")
    assert response.status_code == 200
    return response.json()


def test_the_apps_icon_colour_is_kept_shown_announced_and_survives_a_restart(
    server: ThreadServer, client: httpx.Client, settings: Settings, project_dir: Path
) -> None:
    git_repository(project_dir)
    project = _current(client)
    assert project["vcs"] == "git" and "icon" not in project
    with EventCollector(f"{server.url}/global/event") as events:
        response = client.patch(
            f"/project/{project['id']}", params={"directory": str(project_dir)}, json={"icon": {"color": "pink"}}
        )
        assert response.status_code == 200, response.text
        updated = response.json()
        assert updated["id"] == project["id"] and updated["worktree"] == str(project_dir)
        assert updated["icon"] == {"color": "pink"}
        assert updated["time"]["updated"] >= project["time"]["updated"]
        frame = events.wait_for(lambda f: f.type == "project.updated")
        assert frame.data["directory"] == "global" and frame.properties == updated
    assert _current(client) == updated
    assert client.get("/project").json() == [updated]
    server.stop()
    with thread_server(settings) as again, httpx.Client(base_url=again.url) as fresh:
        assert _current(fresh)["icon"] == {"color": "pink"}
        assert fresh.get("/project").json()[0]["icon"] == {"color": "pink"}


def test_fields_merge_as_opencodes(client: httpx.Client, project_dir: Path) -> None:
    git_repository(project_dir)
    pid = _current(client)["id"]

    def patch(body: object) -> dict:
        response = client.patch(f"/project/{pid}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    patch({"icon": {"color": "pink"}})
    patch({"name": "Hello"})
    patch({"icon": {"url": "data:image/png;base64,AA==", "override": "o"}})
    patched = patch({"commands": {"start": "npm install"}, "bogus": 1, "icon": {"bad": 2}})
    assert patched["name"] == "Hello"
    assert patched["icon"] == {"color": "pink", "url": "data:image/png;base64,AA==", "override": "o"}
    assert patched["commands"] == {"start": "npm install"}
    assert "bogus" not in patched
    unchanged = patch({"name": None, "icon": None, "commands": {"start": None}})
    assert {k: unchanged[k] for k in ("name", "icon", "commands")} == {
        k: patched[k] for k in ("name", "icon", "commands")
    }
    assert patch({"name": "", "icon": {"color": ""}})["name"] == ""  # the app clears a name with ""
    assert _current(client)["icon"]["color"] == ""


def test_unknown_projects_and_bad_bodies(client: httpx.Client, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    create_session(client)  # the server's own directory: not a repository, project "global"
    assert _current(client)["id"] == "global"
    missing = client.patch("/project/0123abc", json={"name": "x"})
    assert missing.status_code == 404
    assert missing.json() == {
        "_tag": "ProjectNotFoundError",
        "projectID": "0123abc",
        "message": "Project not found: 0123abc",
    }
    assert client.patch("/project/global", json={"name": "Scratch"}).json()["name"] == "Scratch"
    body: Any
    for body in ([], {"name": 5}, {"icon": "red"}, {"icon": {"color": 1}}, {"commands": []}, "x"):
        response = client.patch("/project/global", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["name"] == "BadRequest" and response.json()["data"]["message"]
    for raw in (b"{", b""):
        response = client.patch("/project/global", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["data"]["message"]
    assert client.get("/project/current").json()["name"] == "Scratch"


def test_git_init_makes_a_repository_once(server: ThreadServer, client: httpx.Client, tmp_path: Path) -> None:
    folder = tmp_path / "new-folder"
    folder.mkdir()
    scoped = {"directory": str(folder)}
    assert client.get("/project/current", params=scoped).json()["vcs"] is None
    with EventCollector(f"{server.url}/global/event") as events:
        response = client.post("/project/git/init", params=scoped)
        assert response.status_code == 200, response.text
        assert response.json()["vcs"] == "git" and response.json()["worktree"] == str(folder)
        assert response.json()["id"] == "global"  # no commit yet, as OpenCode answers
        assert events.wait_for(lambda f: f.type == "project.updated").properties["vcs"] == "git"
    assert (folder / ".git" / "HEAD").is_file()
    head = (folder / ".git" / "HEAD").stat().st_mtime_ns
    assert client.post("/project/git/init", params=scoped).json()["vcs"] == "git"  # a repository already
    assert (folder / ".git" / "HEAD").stat().st_mtime_ns == head
    assert client.get("/project/current", params=scoped).json()["vcs"] == "git"
    gone = client.post("/project/git/init", params={"directory": str(tmp_path / "missing")})
    assert gone.status_code == 400 and "missing" in gone.json()["data"]["message"]
