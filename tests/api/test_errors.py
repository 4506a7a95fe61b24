"""Bad input gets a 4xx with OpenCode's error body and changes nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers import create_session, text_prompt

MISSING = "ses_000000000000000000000000000"


def _assert_bad_request(response: httpx.Response, kind: str | None = None) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["name"] == "BadRequest"
    assert body["data"]["message"]
    if kind:
        assert body["data"]["kind"] == kind


def test_malformed_json_and_wrong_types(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    headers = {"content-type": "application/json"}
    _assert_bad_request(client.post("/session", content=b"{", headers=headers))
    _assert_bad_request(client.post("/session", json={"title": 5}), "Payload")
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", content=b"{not json", headers=headers))
    missing_parts = client.post(f"/session/{sid}/prompt_async", json={})
    _assert_bad_request(missing_parts, "Payload")
    assert "parts" in missing_parts.json()["data"]["message"]
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", json={"parts": [{"type": "text"}]}))
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", json={"parts": [{"type": "video", "x": 1}]}))
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", json={"parts": []}))
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", json=text_prompt("x", model="opensession/echo")))
    _assert_bad_request(client.post(f"/session/{sid}/prompt_async", json=text_prompt("x", messageID="abc")))
    _assert_bad_request(client.patch(f"/session/{sid}", json={"title": ["no"]}))
    _assert_bad_request(client.get("/session", params={"limit": "abc"}), "Query")
    _assert_bad_request(client.get("/session", params={"directory": "relative/path"}))
    assert client.get(f"/session/{sid}/message").json() == []


@pytest.mark.parametrize("path", ["/session/abc", "/session/msg_123", "/session/ses_bad!id/message"])
def test_badly_prefixed_ids_are_400(client: httpx.Client, path: str) -> None:
    _assert_bad_request(client.get(path), "Params")


def test_unknown_ids_are_404_with_named_error(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    for method, path in [
        ("GET", f"/session/{MISSING}"),
        ("PATCH", f"/session/{MISSING}"),
        ("DELETE", f"/session/{MISSING}"),
        ("GET", f"/session/{MISSING}/message"),
        ("GET", f"/session/{MISSING}/children"),
        ("POST", f"/session/{MISSING}/message"),
        ("POST", f"/session/{MISSING}/prompt_async"),
    ]:
        body = text_prompt("x") if method == "POST" else ({} if method == "PATCH" else None)
        response = client.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json() == {"name": "NotFoundError", "data": {"message": f"Session not found: {MISSING}"}}
    missing_message = "msg_000000000000000000000000000"
    response = client.get(f"/session/{sid}/message/{missing_message}")
    assert response.status_code == 404
    assert response.json()["data"]["message"] == f"Message not found: {missing_message}"


def test_oversize_body_is_413_and_stores_nothing(client: httpx.Client, server) -> None:
    sid = create_session(client)["id"]
    huge = text_prompt("x" * (server.settings.max_body_bytes + 10))
    response = client.post(f"/session/{sid}/prompt_async", json=huge)
    assert response.status_code == 413
    assert response.json()["name"] == "BadRequest"

    def chunks():
        yield b'{"parts": [{"type": "text", "text": "'
        for _ in range(server.settings.max_body_bytes // 65536 + 2):
            yield b"y" * 65536
        yield b'"}]}'

    chunked = client.post(
        f"/session/{sid}/prompt_async", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    assert client.get(f"/session/{sid}/message").json() == []


def test_unknown_route_and_method(client: httpx.Client) -> None:
    response = client.get("/no/such/route")
    assert response.status_code == 404
    assert response.json()["name"] == "NotFoundError"
    wrong = client.put("/session")
    assert wrong.status_code == 405
    assert wrong.json()["data"]["message"]


@pytest.mark.parametrize("v2", [False, True])
def test_a_request_a_stopping_server_gives_up_on_is_a_503_to_retry(v2: bool, server, client) -> None:
    """A request still waiting on a turn when the server's graceful time is up (here 0.2 s; the
    turn's tool runs 5 s): a synchronous prompt, V2's wait. It was a bare 500 "Internal Server
    Error" (bench/chaos.py, a SIGTERM under load); it is a 503 in the route's words (legacy
    ``ServerStoppingError``, V2's declared ``ServiceUnavailableError``), to send again."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import wait_until

    with ThreadPoolExecutor(1) as pool:
        if v2:
            sid = client.post("/api/session", json={}).json()["data"]["id"]
            assert client.post(f"/api/session/{sid}/prompt", json={"prompt": {"text": "TOOL:bash sleep 5"}}).is_success
            waiting = pool.submit(client.post, f"/api/session/{sid}/wait")
        else:
            sid = create_session(client)["id"]
            waiting = pool.submit(client.post, f"/session/{sid}/message", json=text_prompt("TOOL:bash sleep 5"))
        wait_until(lambda: client.get("/session/status").json().get(sid, {}).get("type") == "busy", timeout=10)
        server.stop()
        answer = waiting.result(timeout=30)
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "1"
    error = answer.json()
    if v2:  # the 503 V2 declares
        assert error["_tag"] == "ServiceUnavailableError" and error["service"] == "server", error
    assert (error["message"] if v2 else error["data"]["message"]).endswith("(with the same Idempotency-Key).")
    assert v2 or error["name"] == "ServerStoppingError", error


def test_a_stopping_server_answers_its_requests_for_the_graceful_seconds_it_is_given(
    tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    """``OPENSESSION_GRACEFUL_SECONDS`` bounds how long ``opensession serve`` on SIGTERM keeps
    answering what it had read: a synchronous prompt on a 5 s tool is answered 503 once 1 s has
    passed."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import wait_until
    from tests.servers import process_server

    server = process_server(f"sqlite+aiosqlite:///{tmp_path / 'opensession.db'}", project_dir, config_dir)
    server.env["OPENSESSION_GRACEFUL_SECONDS"] = "1"
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client, ThreadPoolExecutor(1) as pool:
            sid = create_session(client)["id"]
            waiting = pool.submit(client.post, f"/session/{sid}/message", json=text_prompt("TOOL:bash sleep 5"))
            wait_until(lambda: client.get("/session/status").json().get(sid, {}).get("type") == "busy", timeout=10)
            assert server.proc is not None
            stopped = time.monotonic()
            server.proc.terminate()
            answer = waiting.result(timeout=30)
            waited = time.monotonic() - stopped
        assert answer.status_code == 503 and answer.json()["name"] == "ServerStoppingError", answer.text
        assert 0.9 <= waited < 4.5, waited  # not the default 5 s
    finally:
        server.stop()
