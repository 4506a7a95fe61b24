"""A child started through ``app.processes.tied`` dies with the process that started it, even one
killed with SIGKILL (which leaves it no moment to stop its children)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import running, wait_until
from tests.servers import ROOT

PARENT = """
import subprocess, sys
from app.processes import tied
child = subprocess.Popen(tied(["sleep", "60"]))
print(child.pid, flush=True)
child.wait()
"""


def program_of(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_tied_child_dies_with_its_killed_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        # setpriv asks for the death signal and then execs the program: killing the parent before
        # that exec could leave it untied, which is setpriv's window, not what this test is about.
        wait_until(lambda: program_of(child) == "sleep")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not running(child))
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


def test_a_missing_program_is_not_found_before_it_starts() -> None:
    from app.processes import tied

    with pytest.raises(FileNotFoundError):
        tied(["no-such-program-anywhere"])
