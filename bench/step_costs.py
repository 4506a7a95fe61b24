"""CPU of two reads every step makes, in-process: the turn's window and the permission verdicts
on the tools it may offer.

Sessions of 10 and 80 messages are written through the project's runtime
(``bench/seed_history.py``'s ``seed_session``: the echo model's prompts and three-part answers),
then measured with this process's CPU time (median of nine passes over the sessions):

- the window, ``Summaries.window`` (one read; no compaction snapshot: the whole session);
- the verdicts, ``Permissions.disabled_tools`` with the build agent's rules over every built-in tool.

Both are public calls of the runtime, so the same script measures another checkout for a
comparison: ``PYTHONPATH=/path/to/checkout python bench/step_costs.py``. Run from the repository
root::

    python bench/step_costs.py [--quick]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from seed_history import seed_session

from app.runtime.service import Runtime
from app.runtime.tools import TOOLS
from app.settings import Settings
from bench import workspace

SIZES = (10, 80)
PASSES = 9


async def _cpu_per_call(call: Callable[[], Awaitable[object]], calls: int) -> float:
    """Median over ``PASSES`` passes of the CPU microseconds one call takes."""
    passes = []
    for _ in range(PASSES):
        started = time.process_time()
        for _ in range(calls):
            await call()
        passes.append((time.process_time() - started) / calls * 1e6)
    return statistics.median(passes)


async def measure(sessions_per_size: int) -> list[tuple[str, float]]:
    with workspace("opensession-step-costs-") as (base, project, config):
        runtime = Runtime(Settings(db=str(base / "bench.db"), directory=str(project), config_dir=str(config)))
        await runtime.db.open()
        try:
            await runtime.log.start()
            figures = []
            for size in SIZES:
                ids = [(await seed_session(runtime, str(project), size))["id"] for _ in range(sessions_per_size)]

                async def windows(ids: list[str] = ids) -> None:
                    for session_id in ids:
                        await runtime.summaries.window(session_id)

                per_pass = await _cpu_per_call(windows, 4)
                figures.append((f"window read, {size} messages", per_pass / len(ids)))
            session = await runtime.sessions.get(ids[0])
            rules = await runtime.permissions.rules_for(session, "build")
            names = list(TOOLS)

            async def verdicts() -> None:
                runtime.permissions.disabled_tools(rules, names)

            label = f"permission verdicts, {len(rules)} rules x {len(names)} tools"
            figures.append((label, await _cpu_per_call(verdicts, 500)))
            return figures
        finally:
            await runtime.db.close()


def main() -> int:
    figures = asyncio.run(measure(10 if "--quick" in sys.argv else 50))
    print("| per step | CPU |")
    print("| --- | --- |")
    for name, micros in figures:
        print(f"| {name} | {micros:.0f} µs |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
