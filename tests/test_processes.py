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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_tied_child_dies_with_its_killed_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert running(child)
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
