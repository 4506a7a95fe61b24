"""Files, find and VCS routes (legacy and V2) on real directories and real git repositories:
shapes, ordering, ignore rules, confinement, binary and huge files, and the agent's search tools
agreeing with the routes on what is ignored."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.config import ConfigLoader
from app.runtime.abort import AbortSignal
from app.runtime.tools import TOOLS, ToolContext, ToolServices
from app.runtime.workspace import Workspace
from app.settings import Settings
from tests.helpers import session_info
from tests.servers import free_port, thread_server

SECRET = "top-secret-outside"


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


PROJECT: dict[str, str | bytes] = {
    "hello.txt": "hello world\nsecond line\n",
    "src/app.py": 'def main():\n    print("hello")\n',
    "src/nested/util.py": "x = 1\n",
    "build/out.txt": "hello from build\n",
    "debug.log": "hello from a log\n",
    "docs/notes.md": "hello from docs\n",
    ".gitignore": "build/\n*.log\n",
    "opencode.json": json.dumps({"watcher": {"ignore": ["docs/**"]}}),
    "Zeta.txt": "z\n",
    "alpha.txt": "a\n",
    "_under.txt": "u\n",
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    return folder


@pytest.fixture
def project(tmp_path: Path, outside: Path) -> Path:
    """A git repository with one commit, then a modified, a deleted and an untracked file, and
    symlinks leading out of it."""
    root = tmp_path / "project"
    root.mkdir()
    write(root, PROJECT)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    (root / "hello.txt").write_text("hello world changed\nsecond line\nthird\n")
    (root / "src/nested/util.py").unlink()
    (root / "new.txt").write_text("new\n")
    os.symlink(outside / "secret.txt", root / "link.txt")
    os.symlink(outside, root / "linkdir")
    return root


@pytest.fixture
def client(tmp_path: Path, project: Path) -> Iterator[httpx.Client]:
    config = tmp_path / "config"
    config.mkdir()
    settings = Settings(
        db=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
        directory=str(project),
        config_dir=str(config),
        port=free_port(),
    )
    with thread_server(settings) as server, httpx.Client(base_url=server.url, timeout=30.0) as http:
        yield http


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_list_orders_directories_first_and_flags_ignored_entries(client: httpx.Client, project: Path) -> None:
    nodes = ok(client.get("/file", params={"path": ""}))
    assert nodes[0] == {
        "name": ".git",
        "path": ".git/",
        "absolute": str(project / ".git"),
        "type": "directory",
        "ignored": False,
    }
    names = [n["name"] for n in nodes]
    # directories, then files; punctuation before letters, case-insensitive; symlinks left out
    folders = [".git", "build", "docs", "src"]
    files = ["_under.txt", ".gitignore", "alpha.txt", "debug.log", "hello.txt", "new.txt", "opencode.json", "Zeta.txt"]
    assert names == folders + files
    ignored = {n["name"] for n in nodes if n["ignored"]}
    assert ignored == {"build", "docs", "debug.log"}  # .gitignore, and watcher.ignore for docs
    inner = ok(client.get("/file", params={"path": "src"}))
    assert [(n["path"], n["type"]) for n in inner] == [("src/nested/", "directory"), ("src/app.py", "file")]
    assert all(n["ignored"] for n in ok(client.get("/file", params={"path": "build"})))


def test_read_text_binary_and_huge_files(client: httpx.Client, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ok(client.get("/file/content", params={"path": "hello.txt"})) == {
        "type": "text",
        "content": "hello world changed\nsecond line\nthird",  # trimmed, as OpenCode answers
    }
    blob = bytes(range(256)) * 4
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    write(project, {"data.bin": blob, "pic.png": png})
    binary = ok(client.get("/file/content", params={"path": "data.bin"}))
    assert binary == {
        "type": "binary",
        "content": base64.b64encode(blob).decode(),
        "encoding": "base64",
        "mimeType": "application/octet-stream",
    }
    image = ok(client.get("/file/content", params={"path": "pic.png"}))
    assert image["mimeType"] == "image/png" and base64.b64decode(image["content"]) == png
    monkeypatch.setattr("app.runtime.workspace._files.MAX_TEXT_BYTES", 64 * 1024)
    (project / "big.txt").write_text(("y" * 99 + "\n") * 2000)
    big = ok(client.get("/file/content", params={"path": "big.txt"}))
    assert big["truncated"] is True and len(big["content"]) <= 64 * 1024


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "/etc/hostname", "link.txt", "linkdir/secret.txt"])
def test_paths_outside_the_project_are_refused(client: httpx.Client, path: str) -> None:
    for route, params in (("/file/content", {"path": path}), ("/file", {"path": path})):
        response = client.get(route, params=params)
        assert response.status_code == 403, response.text
        body = response.json()
        assert body["name"] == "ForbiddenError" and body["data"]["path"] == path and SECRET not in response.text
    v2 = client.get("/api/fs/list", params={"path": path})
    assert v2.status_code == 403 and v2.json()["_tag"] == "ForbiddenError" and v2.json()["path"] == path
    read = client.get("/api/fs/read/" + path.lstrip("/").replace("..", "%2E%2E"))
    assert read.status_code in (403, 404) and SECRET not in read.text


def test_unknown_paths_and_bad_queries(client: httpx.Client) -> None:
    missing = client.get("/file/content", params={"path": "nope.txt"})
    assert missing.status_code == 404 and missing.json()["name"] == "NotFoundError"
    assert client.get("/file", params={"path": "nope"}).status_code == 404
    assert client.get("/api/fs/read/nope.txt").json()["_tag"] == "NotFoundError"
    assert client.get("/file/content", params={"path": "src"}).status_code == 400
    refused: tuple[tuple[str, dict[str, Any], str], ...] = (
        ("/file", {}, "path"),
        ("/find", {}, "pattern"),
        ("/find/file", {"query": "a", "limit": 0}, "limit"),
        ("/find/file", {"query": "a", "limit": 201}, "limit"),
        ("/find/file", {"query": "a", "type": "socket"}, "type"),
        ("/find/symbol", {}, "query"),
        ("/vcs/diff", {}, "mode"),
        ("/vcs/diff", {"mode": "svn"}, "mode"),
    )
    for route, params, field in refused:
        response = client.get(route, params=params)
        assert response.status_code == 400 and response.json()["name"] == "BadRequest", (route, response.text)
        assert field in response.json()["data"]["message"]
    v2 = client.get("/api/fs/find", params={"query": "a", "limit": "abc"})
    assert v2.status_code == 400 and v2.json()["_tag"] == "InvalidRequestError"
    gone = {"directory": "/nonexistent/project"}
    assert client.get("/find", params={**gone, "pattern": "x"}).status_code == 404
    assert client.get("/find/file", params={**gone, "query": "x"}).status_code == 404
    assert ok(client.get("/vcs/status", params=gone)) == []
    bad_regex = client.get("/find", params={"pattern": "(unclosed"})
    assert bad_regex.status_code == 400 and "regular expression" in bad_regex.json()["data"]["message"]


def test_vcs_routes_in_a_git_repository(client: httpx.Client) -> None:
    assert ok(client.get("/vcs")) == {"branch": "main", "default_branch": "main"}
    expected = [
        {"file": "hello.txt", "additions": 2, "deletions": 1, "status": "modified"},
        {"file": "new.txt", "additions": 1, "deletions": 0, "status": "added"},
        {"file": "src/nested/util.py", "additions": 0, "deletions": 1, "status": "deleted"},
    ]
    status = ok(client.get("/vcs/status"))
    assert [s for s in status if s["file"] not in ("link.txt", "linkdir")] == expected
    legacy = ok(client.get("/file/status"))
    assert {"path": "hello.txt", "added": 2, "removed": 1, "status": "modified"} in legacy
    diff = {d["file"]: d for d in ok(client.get("/vcs/diff", params={"mode": "git"}))}
    assert list(diff["hello.txt"]) == ["file", "patch", "additions", "deletions", "status"]
    assert "-hello world\n+hello world changed\n second line\n+third\n" in diff["hello.txt"]["patch"]
    assert diff["new.txt"]["patch"].startswith("diff --git a/new.txt b/new.txt\nnew file mode 100644\n")
    assert "+++ /dev/null" in diff["src/nested/util.py"]["patch"]
    assert ok(client.get("/vcs/diff", params={"mode": "branch"})) == []  # on the default branch itself
    raw = client.get("/vcs/diff/raw")
    assert raw.headers["content-type"] == "text/x-diff; charset=utf-8"
    assert "diff --git a/hello.txt" in raw.text and "diff --git a/new.txt" in raw.text
    narrow = ok(client.get("/vcs/diff", params={"mode": "git", "context": 0}))
    assert "\n second line\n" not in next(d for d in narrow if d["file"] == "hello.txt")["patch"]


def test_a_raw_diff_applies_back_whole_or_not_at_all(client: httpx.Client, project: Path, tmp_path: Path) -> None:
    """``POST /vcs/apply`` takes what ``/vcs/diff/raw`` gives: undone with ``git checkout``, the
    working tree's changes come back from it. A patch that does not apply changes nothing (400
    ``VcsApplyError``, ``not-clean``); outside git it is ``non-git``."""
    for link in ("link.txt", "linkdir"):  # the fixture's symlinks out of the project: not part of this
        (project / link).unlink()
    raw = client.get("/vcs/diff/raw").text
    changed = (project / "hello.txt").read_text()
    git(project, "checkout", "--", "hello.txt", "src/nested/util.py")
    (project / "new.txt").unlink()
    assert client.post("/vcs/apply", json={"patch": raw}).json() == {"applied": True}
    assert (project / "hello.txt").read_text() == changed
    assert (project / "new.txt").read_text() == "new\n" and not (project / "src/nested/util.py").exists()

    git(project, "checkout", "--", "hello.txt")
    before = (project / "hello.txt").read_text()
    half = raw + "diff --git a/alpha.txt b/alpha.txt\n--- a/alpha.txt\n+++ b/alpha.txt\n@@ -1 +1 @@\n-nope\n+x\n"
    refused = client.post("/vcs/apply", json={"patch": half})
    assert refused.status_code == 400
    assert refused.json()["name"] == "VcsApplyError" and refused.json()["data"]["reason"] == "not-clean"
    assert refused.json()["data"]["message"].startswith("Patch can't be applied: ")  # and what git found:
    assert "patch failed: alpha.txt:1" in refused.json()["data"]["message"]
    assert (project / "hello.txt").read_text() == before  # the hunks that fit were not applied either
    plain = tmp_path / "plain"
    plain.mkdir()
    outside_git = client.post("/vcs/apply", params={"directory": str(plain)}, json={"patch": raw})
    assert outside_git.status_code == 400 and outside_git.json()["data"]["reason"] == "non-git"
    assert client.post("/vcs/apply", json={}).status_code == 400


def test_find_text_caps_at_ten_and_skips_ignored_files(client: httpx.Client, project: Path) -> None:
    matches = ok(client.get("/find", params={"pattern": "hello"}))
    assert {m["path"]["text"] for m in matches} == {"hello.txt", "src/app.py"}  # build, log, docs ignored
    first = next(m for m in matches if m["path"]["text"] == "hello.txt")
    assert first == {
        "path": {"text": "hello.txt"},
        "lines": {"text": "hello world changed\n"},
        "line_number": 1,
        "absolute_offset": 0,
        "submatches": [{"match": {"text": "hello"}, "start": 0, "end": 5}],
    }
    (project / "many.txt").write_text("needle\n" * 50)
    assert len(ok(client.get("/find", params={"pattern": "needle"}))) == 10


def test_find_files_ranks_exact_names_first_and_honours_filters(client: httpx.Client, project: Path) -> None:
    write(project, {"lib/app.py.bak": "", "lib/application.py": "", "zz/mapper.py": "", "app.py": ""})
    found = ok(client.get("/find/file", params={"query": "app.py", "limit": 50}))
    assert found[0] == "app.py" and found[1] == "src/app.py"
    assert found.index("lib/app.py.bak") < found.index("zz/mapper.py")
    assert len(ok(client.get("/find/file", params={"query": "p", "limit": 2}))) == 2
    assert len(ok(client.get("/find/file", params={"query": ""}))) == 10  # OpenCode's default
    dirs = ok(client.get("/find/file", params={"query": "src", "type": "directory"}))
    assert dirs[0] == "src/" and all(d.endswith("/") for d in dirs)
    files = ok(client.get("/find/file", params={"query": "src", "dirs": "false"}))
    assert files and not any(f.endswith("/") for f in files)
    everything = ok(client.get("/find/file", params={"query": "", "limit": 200}))
    assert not any(p.startswith(("build/", "docs/", ".git/")) or p.endswith(".log") for p in everything)
    assert ".gitignore" in everything  # hidden files are found, as OpenCode does
    assert ok(client.get("/find/symbol", params={"query": "main"})) == []


def test_v2_filesystem_routes(client: httpx.Client, project: Path, tmp_path: Path) -> None:
    listing = ok(client.get("/api/fs/list", params={"path": "src"}))
    assert listing["location"]["directory"] == str(project) and listing["location"]["project"]["id"]
    assert listing["data"] == [{"path": "src/nested/", "type": "directory"}, {"path": "src/app.py", "type": "file"}]
    read = client.get("/api/fs/read/src/app.py")
    assert read.status_code == 200 and read.content == (project / "src/app.py").read_bytes()
    found = ok(client.get("/api/fs/find", params={"query": "app", "type": "file"}))
    assert found["data"][0] == {"path": "src/app.py", "type": "file"}
    other = tmp_path / "other"
    write(other, {"only.txt": "x"})
    located = ok(client.get("/api/fs/list", params={"location[directory]": str(other)}))
    assert located["location"]["directory"] == str(other) and located["data"] == [{"path": "only.txt", "type": "file"}]


def test_a_directory_outside_git(client: httpx.Client, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write(plain, {"keep.txt": "needle\n", "skip/x.txt": "needle\n", "other.md": "needle\n"})
    write(plain, {".gitignore": "skip/\n", ".ignore": "other.md\n"})
    scoped = {"directory": str(plain)}
    assert ok(client.get("/vcs", params=scoped)) == {"branch": None, "default_branch": None}
    assert ok(client.get("/vcs/status", params=scoped)) == []
    assert ok(client.get("/file/status", params=scoped)) == []
    assert ok(client.get("/vcs/diff", params={**scoped, "mode": "git"})) == []
    assert client.get("/vcs/diff/raw", params=scoped).text == ""
    assert [m["path"]["text"] for m in ok(client.get("/find", params={**scoped, "pattern": "needle"}))] == ["keep.txt"]
    found = ok(client.get("/find/file", params={**scoped, "query": "", "limit": 50}))
    assert sorted(found) == [".gitignore", ".ignore", "keep.txt"]
    flags = {n["name"]: n["ignored"] for n in ok(client.get("/file", params={**scoped, "path": ""}))}
    assert flags == {"skip": True, ".gitignore": False, ".ignore": False, "keep.txt": False, "other.md": True}


def test_a_missing_ripgrep_is_a_clear_error(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.runtime.workspace._ripgrep.locate", lambda: None)
    response = client.get("/find", params={"pattern": "x"})
    assert response.status_code == 503 and "ripgrep" in response.json()["data"]["message"]


async def test_the_tools_ignore_what_the_routes_ignore(project: Path, tmp_path: Path) -> None:
    workspace = Workspace(ConfigLoader(str(tmp_path / "no-user-config")))
    services = ToolServices(todos=None, files=None, tasks=None, workspace=workspace)  # type: ignore[arg-type]

    async def allow(*_: Any) -> None:
        return None

    session = session_info(str(project))
    ctx = ToolContext(session, "msg_test", "call_test", AbortSignal(), allow, allow, services)
    grep = (await TOOLS["grep"].run(ctx, {"pattern": "hello"})).output
    assert grep.startswith("Found 2 matches") and "build" not in grep and "docs" not in grep and SECRET not in grep
    assert f"{project}/hello.txt:\n  Line 1: hello world changed" in grep
    globbed = (await TOOLS["glob"].run(ctx, {"pattern": "**/*.txt"})).output.splitlines()
    assert sorted(Path(p).name for p in globbed) == ["Zeta.txt", "_under.txt", "alpha.txt", "hello.txt", "new.txt"]
    listing = (await TOOLS["list"].run(ctx, {})).output
    assert listing.startswith(f"{project}/\n  src/\n    app.py\n") and "build" not in listing and "notes" not in listing
    assert "link" not in listing
    routes = set(await workspace.find_files(str(project), "", "file", 200))
    assert routes == {str(Path(p).relative_to(project)) for p in await workspace.files(str(project), project)}


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """A project that is a subdirectory ``app/`` of a git repository, with a file beside it."""
    repo = tmp_path / "repo"
    write(repo, {"app/keep.txt": "keep\n", "app/gone.txt": "gone\n", "beside.txt": "beside\n"})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo / "app"


def test_a_raw_diff_applies_back_in_a_subdirectory_project(client: httpx.Client, nested: Path) -> None:
    """``/vcs/diff/raw`` names paths relative to the project, git apply reads them from the top of
    the repository: the round trip still restores the changes (it once answered 200 and did nothing)."""
    scoped = {"directory": str(nested)}
    write(nested, {"keep.txt": "kept, changed\n", "deep/new.txt": "new\n"})
    (nested / "gone.txt").unlink()
    (nested.parent / "beside.txt").write_text("beside, changed\n")  # outside the project: not its patch
    raw = client.get("/vcs/diff/raw", params=scoped).text
    assert "beside" not in raw
    git(nested, "checkout", "--", "keep.txt", "gone.txt")
    (nested / "deep/new.txt").unlink()
    assert ok(client.post("/vcs/apply", params=scoped, json={"patch": raw})) == {"applied": True}
    assert (nested / "keep.txt").read_text() == "kept, changed\n"
    assert (nested / "deep/new.txt").read_text() == "new\n" and not (nested / "gone.txt").exists()
    unrelated = client.post("/vcs/apply", params=scoped, json={"patch": "not a patch at all\n"})
    assert unrelated.status_code == 400 and unrelated.json()["data"]["reason"] == "not-clean"


def _modify(path: str, old: str, new: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def _move(kind: str, source: str, target: str) -> str:
    return f"diff --git a/{source} b/{target}\nsimilarity index 100%\n{kind} from {source}\n{kind} to {target}\n"


@pytest.mark.parametrize("where", ["subdirectory", "top"])
def test_vcs_apply_refuses_paths_outside_the_project(
    client: httpx.Client, nested: Path, outside: Path, where: str
) -> None:
    """Every path a patch names stays inside the project: ``..``, absolute names, renames and
    copies out of it or into it from outside are refused (400) and change nothing."""
    project = nested if where == "subdirectory" else nested.parent
    beside = os.path.relpath(nested.parent / "beside.txt", project)
    secret = os.path.relpath(outside / "secret.txt", project)
    hostile = [
        _modify(beside, "beside", "pwned") if where == "subdirectory" else _modify(secret, SECRET, "pwned"),
        _modify("/" + str(nested.parent / "beside.txt").lstrip("/"), "beside", "pwned"),
        _move("rename", secret, "stolen.txt"),
        _move("rename", "keep.txt" if where == "subdirectory" else "app/keep.txt", "../escaped.txt"),
        _move("copy", secret, "stolen.txt"),
        _move("copy", "keep.txt" if where == "subdirectory" else "app/keep.txt", "../escaped.txt"),
    ]
    before = {p: p.read_bytes() for p in (*nested.parent.rglob("*.txt"), outside / "secret.txt")}
    for patch in hostile:
        response = client.post("/vcs/apply", params={"directory": str(project)}, json={"patch": patch})
        assert response.status_code == 400, (patch, response.text)
        assert response.json()["name"] == "VcsApplyError" and response.json()["data"]["reason"] == "not-clean"
        assert response.json()["data"]["message"].startswith("Patch can't be applied: ")  # and why
        assert {p: p.read_bytes() for p in before} == before, patch
        assert not [*nested.parent.parent.rglob("stolen.txt"), *nested.parent.parent.rglob("escaped.txt")]


HOSTILE = {
    "a name over 255 bytes": "a" * 300,
    "a path over 4096 bytes": ("\u00e9" * 100 + "/") * 30 + "x",
    "a symlink loop": "loop",
    "a path through a symlink loop": "loop/x",
    "a path through a file": "hello.txt/x",
    "a NUL byte": "a\0b",
    "a long name on the way": "d" * 256 + "/x",
}


@pytest.mark.parametrize("path", HOSTILE.values(), ids=HOSTILE.keys())
def test_paths_the_system_refuses_are_4xx_on_every_file_route(client: httpx.Client, project: Path, path: str) -> None:
    """ENAMETOOLONG, ELOOP, ENOTDIR, a NUL byte... in a path or in the directory a request names
    are a 4xx in the family's shape, naming the problem; never a 500 (they once were)."""
    os.symlink("loop", project / "loop")
    as_directory = str(project / path)
    takes_path = [
        ("/file", {"path": path}),
        ("/file/content", {"path": path}),
        ("/api/fs/list", {"path": path}),
        ("/api/fs/read/" + quote(path), {}),
        ("/file", {"path": "", "directory": as_directory}),
        ("/file/content", {"path": "hello.txt", "directory": as_directory}),
        ("/api/fs/list", {"location[directory]": as_directory}),
        ("/api/fs/read/hello.txt", {"location[directory]": as_directory}),
    ]
    may_answer = [
        ("/find", {"pattern": path}),
        ("/find/file", {"query": path}),
        ("/api/fs/find", {"query": path}),
        ("/find", {"pattern": "x", "directory": as_directory}),
        ("/find/file", {"query": "x", "directory": as_directory}),
        ("/api/fs/find", {"query": "x", "location[directory]": as_directory}),
        ("/vcs/status", {"directory": as_directory}),
        ("/vcs/diff", {"mode": "git", "directory": as_directory}),
        ("/file/status", {"directory": as_directory}),
    ]
    for route, params in takes_path + may_answer:
        response = client.get(route, params=params)
        assert response.status_code < 500, (route, params, response.text)
        if (route, params) in takes_path:
            assert 400 <= response.status_code < 500, (route, params, response.text)
        if response.status_code >= 400:
            body = response.json()
            message = body["message"] if route.startswith("/api/") else body["data"]["message"]
            assert message and "Unexpected" not in message, (route, params, body)


def test_names_that_are_not_utf8_are_listed_with_replacement_characters(client: httpx.Client, project: Path) -> None:
    """A file name with a byte that is not UTF-8 once made the root listing, ``@`` search and the
    VCS status answer 400 (the name could not be encoded); it is shown as U+FFFD, as in OpenCode."""
    with open(os.fsencode(project) + b"/bad\xff.txt", "wb") as handle:
        handle.write(b"needle\n")
    os.mkdir(os.fsencode(project) + b"/dir\xfe")
    shown = "bad\ufffd.txt"
    assert shown in [n["name"] for n in ok(client.get("/file", params={"path": ""}))]
    assert "dir\ufffd/" in [e["path"] for e in ok(client.get("/api/fs/list"))["data"]]
    assert shown in ok(client.get("/find/file", params={"query": "bad"}))
    assert {"path": shown, "type": "file"} in ok(client.get("/api/fs/find", params={"query": "bad"}))["data"]
    assert shown in [c["file"] for c in ok(client.get("/vcs/status"))]
    assert shown in [c["path"] for c in ok(client.get("/file/status"))]
    assert shown in [d["file"] for d in ok(client.get("/vcs/diff", params={"mode": "git"}))]
