"""End-to-end compatibility with the official OpenCode JS SDK (``@opencode-ai/sdk``, pinned in
tests/sdk/package.json): ``tests/sdk/flow.mjs`` drives a real server through create session ->
prompt_async -> event stream -> messages -> abort with the V1 client, ``tests/sdk/flow_v2.mjs``
through the V2 API (``/api/...``) with the V2 client; both print one JSON line per check."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ThreadServer

SDK_DIR = Path(__file__).resolve().parent.parent / "sdk"
FLOW = SDK_DIR / "flow.mjs"
FLOW_V2 = SDK_DIR / "flow_v2.mjs"
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
EXPECTED_CHECKS_V2 = [
    "v2.session.create",
    "v2.session.prompt",
    "v2.session.prompt.idempotent",
    "v2.session.prompt.conflict",
    "v2.session.wait",
    "v2.session.messages",
    "v2.session.history",
    "v2.session.events",
    "v2.session.active",
    "v2.session.interrupt",
    "v2.integration",
    "done",
]
FLOW_TIMEOUT = 90  # flow.mjs and flow_v2.mjs have their own 60 s watchdog


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the SDK test needs Node.js 20+ (apt-get install nodejs npm)")
    if not (SDK_DIR / "node_modules" / "@opencode-ai" / "sdk" / "package.json").is_file():
        pytest.fail("tests/sdk/node_modules is missing: run `npm ci --prefix tests/sdk` first")
    return node


def run_flow(flow: Path, url: str, expected: list[str]) -> tuple[dict[str, dict[str, Any]], str]:
    """Run one SDK flow script against the server at ``url``; answer its checks by name and a
    report for messages."""
    node = _node()
    try:
        proc = subprocess.run(
            [node, str(flow), url],
            cwd=SDK_DIR,
            capture_output=True,
            text=True,
            timeout=FLOW_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{flow.name} did not finish within {FLOW_TIMEOUT} s; stdout so far:\n{exc.stdout!r}")
    report = f"exit code {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, report

    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [record["check"] for record in records] == expected, report
    assert all(record["ok"] is True for record in records), report
    return {record["check"]: record for record in records}, report


@pytest.mark.slow
def test_official_sdk_flow(server: ThreadServer) -> None:
    checks, report = run_flow(FLOW, server.url, EXPECTED_CHECKS)

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


@pytest.mark.slow
def test_official_sdk_v2_flow(server: ThreadServer) -> None:
    checks, report = run_flow(FLOW_V2, server.url, EXPECTED_CHECKS_V2)

    assert checks["v2.session.create"]["sessionID"].startswith("ses_")
    assert checks["v2.session.prompt"]["id"].startswith("msg_")
    assert checks["v2.session.prompt.conflict"]["status"] == 409
    assert checks["v2.session.prompt.conflict"]["tag"] == "ConflictError"
    messages = checks["v2.session.messages"]
    assert messages["types"] == ["assistant", "user"], report
    assert messages["assistantText"] == "Echo: hello from the OpenCode SDK v2"
    history = checks["v2.session.history"]
    assert history["firstSeq"] == 0 and history["count"] >= 5, report
    assert {"session.next.prompt.admitted", "session.next.step.ended"} <= set(history["types"]), report
    events = checks["v2.session.events"]
    assert "skipped" not in events, "the pinned SDK exposes v2.session.events"
    assert events["firstSeq"] == 1 and events["idLinesAreSeqs"] is True, report
    assert checks["v2.session.active"]["entry"] == {"type": "running"}
    interrupted = checks["v2.session.interrupt"]
    assert interrupted["error"] is not None or interrupted["finish"] not in (None, "stop"), report
    integration = checks["v2.integration"]
    assert integration["integrations"] >= 1 and integration["credential"].startswith("cred_"), report
