"""Child processes that die with the server. A ``kill -9`` leaves the server no moment to stop
what it started, so the kernel is asked to: on Linux a child is started through util-linux's
``setpriv --pdeathsig KILL``, which has the kernel send it SIGKILL once the thread that started
it is gone (all of them are, when the server dies), and then runs the program itself in the same
process. Dearer ways would be a ``preexec_fn`` (it makes every spawn a full ``fork`` of the
server: ten times slower with a large heap) or a supervisor process.

Only the child itself is tied, not what it starts in turn. Without ``setpriv`` (not Linux, or no
util-linux) children start untied, with one warning.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from functools import cache

log = logging.getLogger("opensession.processes")


@cache
def _setpriv(path: str) -> str | None:
    """``setpriv`` on ``path`` if it can tie a child (``--pdeathsig`` came with util-linux 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    found = shutil.which("setpriv", path=path)
    probe = [found, "--pdeathsig", "KILL", "--", found, "--version"] if found else None
    if probe is None or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        log.warning("setpriv (util-linux 2.33+) is missing: a killed server may leave its children running")
        return None
    return found


def tied(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line that starts ``argv`` tied to the server's life. The program is looked up
    on ``env``'s PATH (the server's by default) first, so a missing one raises FileNotFoundError
    as starting it untied would, not an exit status of ``setpriv``'s."""
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    program = shutil.which(argv[0], path=path)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
    setpriv = _setpriv(path)
    return [program, *argv[1:]] if setpriv is None else [setpriv, "--pdeathsig", "KILL", "--", program, *argv[1:]]


@cache
def _own_scripts() -> str:
    """The directory of the server's own interpreter's scripts (its virtualenv's ``bin``)."""
    return os.path.dirname(sys.executable)


def find_program(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """``name`` on PATH, else beside the server's interpreter: a program installed with the
    server (``pip install`` into its virtualenv: ruff, basedpyright) is found even where that
    virtualenv is not activated."""
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    return shutil.which(name, path=path) or shutil.which(name, path=_own_scripts())
