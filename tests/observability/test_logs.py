"""Structured logs: with ``--log-format json`` every line is a JSON object; a turn's lines carry
the request id the client sent, the session, the directory and the process id; no secret (the
server's password, a provider key from the environment) appears anywhere in the log."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app.observability import logs
from tests.helpers import text_prompt
from tests.servers import process_server

PASSWORD = "pw-never-in-logs-7731"
API_KEY = "sk-test-never-in-logs-0123456789"


def test_redaction_masks_secrets_wherever_they_appear() -> None:
    logs.secret("hunter2-registered")
    for text in (
        "key sk-ant-api03-abcdefghijkl in a message",
        "Authorization: Bearer abcdefghijklmnop",
        "Authorization: Basic b3BlbmNvZGU6c2VjcmV0",
        "postgresql://user:pg-pass-123@db:5432/x",
        'config {"apiKey": "plain-value-xyz"} and password=letmein99',
        "the password is hunter2-registered",
    ):
        masked = logs.redact(text)
        for fragment in ("abcdefghijkl", "abcdefghijklmnop", "b3BlbmNvZGU6", "pg-pass-123", "plain-value", "letmein99"):
            assert fragment not in masked, masked
        assert "hunter2-registered" not in masked and logs.MASK in masked


def test_a_request_id_comes_from_the_caller_or_its_trace() -> None:
    assert logs.request_id("abc-123", None) == "abc-123"
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert logs.request_id(None, f"00-{trace}-00f067aa0ba902b7-01") == trace
    assert logs.request_id("bad id with spaces", "garbage") not in ("bad id with spaces", "garbage")


def test_a_records_exception_is_redacted_too(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    level, handlers = root.level, root.handlers
    handler = logs.configure("json", "info")
    try:
        try:
            raise RuntimeError(f"provider said no to {API_KEY}")
        except RuntimeError:
            logging.getLogger("opensession.test").exception("call failed with key %s", API_KEY)
        handler.flush()
    finally:
        root.handlers, root.level = handlers, level
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["level"] == "error" and "RuntimeError" in line["error"]
    assert API_KEY not in json.dumps(line)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_json_lines_of_a_turn_carry_its_ids_and_no_secret(
    database_url: str, project_dir: Path, config_dir: Path
) -> None:
    server = process_server(database_url, project_dir, config_dir)
    server.args += ["--log-format", "json", "--log-level", "info"]
    server.env.update({"OPENCODE_SERVER_PASSWORD": PASSWORD, "OPENAI_API_KEY": API_KEY})
    with server.log.open("ab") as log:
        server.proc = subprocess.Popen(server.args, env=server.env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        auth = ("opencode", PASSWORD)
        with httpx.Client(base_url=server.url, timeout=30, auth=auth) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and server.proc.poll() is None, server.log_tail()
                time.sleep(0.05)
            sid = client.post("/session", json={}).json()["id"]
            answered = client.post(
                f"/session/{sid}/message", json=text_prompt("hello"), headers={"x-request-id": "req-turn-42"}
            )
            assert answered.status_code == 200 and answered.headers["x-request-id"] == "req-turn-42"
            assert client.get("/healthz", auth=None).headers["x-request-id"]  # a new one when none is sent
    finally:
        server.stop()
    text = server.log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines, "the server logged nothing"
    turn = [entry for entry in lines if entry["message"].startswith("turn finished")]
    assert len(turn) == 1, lines
    assert turn[0]["request_id"] == "req-turn-42" and turn[0]["session_id"] == sid
    assert turn[0]["directory"] == str(project_dir) and turn[0]["pid"] == server.proc.pid
    assert PASSWORD not in text and API_KEY not in text
