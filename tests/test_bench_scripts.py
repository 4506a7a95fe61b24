"""The benchmark scripts that drive the runtime in-process (``bench/seed_history.py``, used by
``bench/history.py`` and ``bench/step_costs.py``) call its internals, so a rename breaks them
without any other test noticing: one quick run keeps them working. Their figures are not judged
here (``bench/README.md``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.servers import ROOT


def test_step_costs_seeds_sessions_through_the_runtime_and_prints_its_figures() -> None:
    result = subprocess.run(
        [sys.executable, "bench/step_costs.py", "--quick"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for figure in ("window read, 10 messages", "window read, 80 messages", "permission verdicts"):
        assert figure in result.stdout, result.stdout
