"""A child started through ``app.processes.tied`` dies with the process that started it, even one
killed with SIGKILL (which leaves it no moment to stop its children); through ``tied_group``, so
does everything in the child's process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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


GROUP_PARENT = """
import subprocess, sys
from app.processes import tied_group
child = subprocess.Popen(
    tied_group(["bash", "-c", "sleep 61 & echo $!; wait"]), stdout=subprocess.PIPE, start_new_session=True
)
print(child.stdout.readline().decode().strip(), flush=True)
child.wait()
"""

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's"
)


def program_of(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


def assert_dies_with_its_killed_parent(parent_code: str) -> None:
    """Run ``parent_code``, which prints the pid of a ``sleep`` it started; kill -9 the parent and
    expect that ``sleep`` gone."""
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        # setpriv asks for the death signal and then execs the program (and a shell forks and then
        # execs): killing the parent before that could leave it untied, which is not what the
        # tests are about.
        wait_until(lambda: program_of(child) == "sleep")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not running(child))
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


@linux_only
def test_a_tied_child_dies_with_its_killed_parent() -> None:
    assert_dies_with_its_killed_parent(PARENT)


def test_a_missing_program_is_not_found_before_it_starts() -> None:
    from app.processes import tied

    with pytest.raises(FileNotFoundError):
        tied(["no-such-program-anywhere"])


@linux_only
def test_what_a_tied_group_put_in_the_background_dies_with_its_killed_parent() -> None:
    assert_dies_with_its_killed_parent(GROUP_PARENT)


def test_a_tied_group_keeps_the_commands_stdin_and_exit_status() -> None:
    from app.processes import tied_group

    command = tied_group(["bash", "-c", "read line; echo got $line; exit 3"])
    done = subprocess.run(command, input="hello\n", capture_output=True, text=True, start_new_session=True, timeout=10)
    assert (done.stdout, done.returncode) == ("got hello\n", 3)


def test_a_group_wide_sigterm_reaches_the_command_and_the_tied_group_waits_for_it(tmp_path) -> None:
    """The guard outlives a SIGTERM to the group, so whoever waits on it waits for the command's
    own ending (here a slow one, with its own status)."""
    from app.processes import tied_group

    script = 'trap "sleep 0.3; echo ended > ended.txt; exit 5" TERM; touch started.txt; sleep 30 & wait'
    child = subprocess.Popen(tied_group(["bash", "-c", script]), cwd=tmp_path, start_new_session=True)
    try:
        wait_until(lambda: (tmp_path / "started.txt").exists())
        time.sleep(0.1)  # the trap is set before the file is touched; this lets ``wait`` begin
        os.killpg(child.pid, signal.SIGTERM)
        assert child.wait(timeout=10) == 5
        assert (tmp_path / "ended.txt").read_text() == "ended\n"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
