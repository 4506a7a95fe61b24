"""``opensession serve`` as a process: its start-up runs without the garbage collector, which is
on again, with the start-up's heap frozen, once the server is up (app/api/server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT, free_port

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
