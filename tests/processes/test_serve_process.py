"""What a server process loads, and when: ``opensession serve`` starts without the garbage
collector, which is on again, with the start-up's heap frozen, once the server is up
(app/api/server.py); a first prompt outside git does not load the project watcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.servers import ROOT, free_port, process_server

SCRIPT = """
import gc, json, sys
import app.api.server as server
seen = {}
started = server.Server.startup
async def startup(self, sockets=None):
    seen["collecting while starting"] = gc.isenabled()
    await started(self, sockets)
    seen["collecting once up"] = gc.isenabled()
    seen["frozen"] = gc.get_freeze_count()
    self.should_exit = True
server.Server.startup = startup
from app.cli import main
code = main(sys.argv[1:])
print(json.dumps(seen | {"exit": code}))
"""


def test_serve_starts_without_the_collector_and_turns_it_on_once_up(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OPENSESSION_CONFIG_DIR": str(tmp_path / "config"),
        "OPENSESSION_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
    }
    args = ["serve", "--port", str(free_port()), "--db", str(tmp_path / "s.db"), "--directory", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["collecting while starting"] is False, done.stderr
    assert seen["collecting once up"] is True
    assert seen["frozen"] > 10_000  # the modules and the app, out of every later collection
    assert seen["exit"] == 0


def test_a_directory_outside_git_is_not_watched_and_loads_no_watcher(tmp_path: Path) -> None:
    """Only a git project is watched; anywhere else the first prompt does not even load the
    watcher's native library (loading it is milliseconds of CPU and more of disk reads)."""
    script = f"""
import asyncio, sys
from app.api.app import create_app
from app.runtime.inputs import PromptRequest
from app.settings import Settings
where = "{tmp_path}"
app = create_app(Settings(db=f"sqlite:///{{where}}/w.db", directory=where, config_dir=where, data_dir=where))
async def main():
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        session = await runtime.sessions.create(directory=where)
        hello = PromptRequest(parts=[{{"type": "text", "text": "hi"}}], no_reply=True)
        await runtime.prompting.prompt(session["id"], hello)
        watcher = runtime.workspace._watchers[where]  # its task ends once it finds no repository
        await asyncio.wait_for(watcher.task, 30)
asyncio.run(main())
print("watchfiles" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_what_the_server_inherited_does_not_reach_the_commands_it_runs(tmp_path: Path) -> None:
    """A descriptor the server's parent left open stays the server's: a shell command it runs
    (uvloop's spawn passes on everything inheritable) does not get it."""
    marker = tmp_path / "left-open-by-the-parent"
    server = process_server(str(tmp_path / "s.db"), tmp_path, tmp_path / "config")
    with marker.open("w") as stray, server.log.open("ab") as log:
        os.set_inheritable(stray.fileno(), True)
        server.proc = subprocess.Popen(
            server.args, env=server.env, stdout=subprocess.DEVNULL, stderr=log, pass_fds=[stray.fileno()]
        )
    try:
        server.wait_started()
        session = httpx.post(f"{server.url}/session", json={}).json()
        body = {"agent": "build", "command": "ls -l /proc/$$/fd/"}
        shell = httpx.post(f"{server.url}/session/{session['id']}/shell", json=body, timeout=30)
        assert shell.status_code == 200, shell.text
        listed = shell.json()["parts"][-1]["state"]["output"]
        assert "0 -> " in listed, listed  # the listing ran
        assert marker.name not in listed, listed
    finally:
        server.stop()
