"""End-to-end compatibility with the official OpenCode JS SDK (``@opencode-ai/sdk``, pinned in
tests/sdk/package.json): ``tests/sdk/flow.mjs`` drives a real server through create session ->
prompt_async -> event stream -> messages -> abort, printing one JSON line per check."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.servers import ThreadServer

SDK_DIR = Path(__file__).resolve().parent / "sdk"
FLOW = SDK_DIR / "flow.mjs"
EXPECTED_CHECKS = [
    "event.subscribe",
    "session.create",
    "session.promptAsync",
    "event.message.part.delta",
    "event.session.idle",
    "session.messages",
    "session.abort",
    "done",
]
FLOW_TIMEOUT = 90  # flow.mjs has its own 60 s watchdog


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the SDK test needs Node.js 20+ (apt-get install nodejs npm)")
    if not (SDK_DIR / "node_modules" / "@opencode-ai" / "sdk" / "package.json").is_file():
        pytest.fail("tests/sdk/node_modules is missing: run `npm ci --prefix tests/sdk` first")
    return node


@pytest.mark.slow
def test_official_sdk_flow(server: ThreadServer) -> None:
    node = _node()
    try:
        proc = subprocess.run(
            [node, str(FLOW), server.url],
            cwd=SDK_DIR,
            capture_output=True,
            text=True,
            timeout=FLOW_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"flow.mjs did not finish within {FLOW_TIMEOUT} s; stdout so far:\n{exc.stdout}")
    report = f"exit code {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, report

    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    checks = {record["check"]: record for record in records}
    assert [record["check"] for record in records] == EXPECTED_CHECKS, report
    assert all(record["ok"] is True for record in records), report

    assert checks["session.create"]["sessionID"].startswith("ses_")
    assert checks["session.promptAsync"]["status"] == 204
    delta = checks["event.message.part.delta"]
    assert delta["count"] >= 2 and delta["text"] == "Echo: hello from the OpenCode SDK", report
    assert checks["event.session.idle"]["sessionID"] == checks["session.create"]["sessionID"]
    messages = checks["session.messages"]
    assert messages["roles"] == ["user", "assistant"], report
    assert messages["assistantText"] == "Echo: hello from the OpenCode SDK"
    assert checks["session.abort"]["error"] == "MessageAbortedError"
    assert checks["session.abort"]["status"] in {"idle", "idle (absent)"}
