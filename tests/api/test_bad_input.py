"""Inputs found by fuzzing (schemathesis and hand-written): each must be a 4xx JSON error in the
family's shape, leave nothing half-written, and leave the session usable."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from tests.helpers import create_session, text_prompt
from tests.servers import ThreadServer

BIG = 2**64  # beyond what orjson and SQLite integers hold
HEADERS = {"content-type": "application/json"}


def _raw(client: httpx.Client, method: str, path: str, body: str) -> httpx.Response:
    return client.request(method, path, content=body.encode("utf-8", "surrogatepass"), headers=HEADERS)


def _legacy_400(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["name"] == "BadRequest" and response.json()["data"]["message"]


def _v2_400(response: httpx.Response, tag: str = "InvalidRequestError") -> None:
    assert response.status_code == 400, response.text
    assert response.json()["_tag"] == tag and response.json()["message"]


def test_unstorable_json_values_are_400_and_store_nothing(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    before = client.get(f"/session/{sid}").json()
    _legacy_400(_raw(client, "POST", "/session", json.dumps({"metadata": {"a": BIG}})))
    _legacy_400(_raw(client, "POST", "/session", '{"metadata": {"a": "\\ud800"}}'))
    _legacy_400(_raw(client, "PATCH", f"/session/{sid}", json.dumps({"metadata": {"a": BIG}})))
    _legacy_400(
        _raw(client, "POST", f"/session/{sid}/prompt_async", '{"parts": [{"type": "text", "text": "a\\udfff"}]}')
    )
    _legacy_400(
        _raw(
            client,
            "POST",
            f"/session/{sid}/message",
            json.dumps({"parts": [{"type": "text", "text": "x", "metadata": {"n": BIG}}]}),
        )
    )
    _v2_400(_raw(client, "POST", f"/api/session/{sid}/prompt", '{"prompt": {"text": "a\\ud800"}}'))
    assert client.get(f"/session/{sid}").json() == before
    assert client.get(f"/session/{sid}/message").json() == []
    assert client.post(f"/session/{sid}/message", json=text_prompt("still works")).status_code == 200


def test_numbers_beyond_64_bits_in_queries_cursors_and_resume_ids(server: ThreadServer, client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    _v2_400(client.get(f"/api/session/{sid}/history", params={"after": 2**63}))
    _legacy_400(client.get("/session", params={"start": 2**63}))
    cursor = (
        base64.urlsafe_b64encode(
            json.dumps(
                {
                    "order": "desc",
                    "directory": "/x",
                    "search": None,
                    "anchor": {"id": "ses_x", "time": BIG, "direction": "next"},
                }
            ).encode()
        )
        .decode()
        .rstrip("=")
    )
    _v2_400(client.get("/api/session", params={"cursor": cursor}), "InvalidCursorError")
    typed = (
        base64.urlsafe_b64encode(
            json.dumps({"order": "desc", "directory": 5, "search": 5, "anchor": {"id": "ses_x", "time": 1}}).encode()
        )
        .decode()
        .rstrip("=")
    )
    _v2_400(client.get("/api/session", params={"cursor": typed}), "InvalidCursorError")
    for path in ("/event", "/global/event", "/api/event", f"/api/session/{sid}/event"):
        response = client.get(path, headers={"Last-Event-ID": str(BIG)})
        assert response.status_code == 400, path
    _v2_400(client.get(f"/api/session/{sid}/event", params={"after": 2**63}))


@pytest.mark.parametrize("directory", ["/tmp/a\0b", "relative/dir"])
def test_bad_directories_are_refused(client: httpx.Client, directory: str) -> None:
    _legacy_400(client.post("/session", params={"directory": directory}, json={}))
    _v2_400(client.post("/api/session", json={"location": {"directory": directory}}))
    for path in ("/project/current", "/vcs", "/config"):
        _legacy_400(client.get(path, params={"directory": directory}))


def test_an_overlong_directory_name_is_just_a_directory_without_config(client: httpx.Client) -> None:
    long_dir = "/" + "a" * 300
    assert client.get("/config", params={"directory": long_dir}).status_code == 200
    sid = client.post("/session", params={"directory": long_dir}, json={}).json()["id"]
    assert client.post(f"/session/{sid}/message", json=text_prompt("hi")).status_code == 200


def test_part_patch_keeps_the_shapes_clients_read(client: httpx.Client) -> None:
    sid = create_session(client)["id"]
    user = client.post(f"/session/{sid}/message", json=text_prompt("hi", noReply=True)).json()
    part = user["parts"][0]
    path = f"/session/{sid}/message/{user['info']['id']}/part/{part['id']}"
    for bad in (
        {"id": part["id"], "type": "file"},
        {"id": part["id"], "type": "text", "text": 5},
        {"id": part["id"], "type": "agent"},
    ):
        _legacy_400(client.patch(path, json=bad))
    assert client.get(f"/api/session/{sid}/message").status_code == 200


def test_error_shapes_for_unknown_routes_and_undecodable_bodies(client: httpx.Client) -> None:
    missing = client.put("/api/session")
    assert missing.status_code == 405 and missing.json()["_tag"] == "MethodNotAllowed"
    assert client.get("/api/nothing").json()["_tag"] == "NotFoundError"
    undecodable = client.post("/session", content=b'{"title": "\xff\xfe"}', headers=HEADERS)
    _legacy_400(undecodable)
    _v2_400(client.post("/api/session", content=b'{"id": "\xff"}', headers=HEADERS))
    _legacy_400(client.patch(f"/session/{create_session(client)['id']}", json={"time": {"archived": "NaN"}}))


LONE = ["\\ud800", "a\\udfff", "\\udbff\\u0041", "\\ude00\\ud83d"]  # JSON escapes of lone surrogates


@pytest.mark.parametrize("lone", LONE)
def test_a_lone_surrogate_in_any_body_is_refused_before_the_route_acts(client: httpx.Client, lone: str) -> None:
    """Refused up front: once a pty was created (and listing every pty broke) by a title the 400
    answer then refused to encode; a credential label broke ``GET /api/integration`` for good."""
    sid = create_session(client)["id"]
    pty = client.post("/pty", json={"title": "term"}).json()["id"]
    lists = ("/pty", "/api/pty", "/api/integration", "/session", "/api/session", f"/session/{sid}")
    before = {path: client.get(path).json() for path in lists}
    title = f'{{"title": "{lone}"}}'
    for method, path, body in (
        ("POST", "/pty", title),
        ("PUT", f"/pty/{pty}", title),
        ("POST", "/api/pty", title),
        ("PUT", f"/api/pty/{pty}", title),
        ("POST", "/api/integration/deepseek/connect/key", f'{{"key": "k", "label": "{lone}"}}'),
        ("PUT", "/auth/deepseek", f'{{"type": "api", "key": "{lone}"}}'),
        ("POST", "/session", title),
        ("PATCH", f"/session/{sid}", title),
        ("POST", f"/session/{sid}/message", f'{{"parts": [{{"type": "text", "text": "{lone}"}}]}}'),
        ("POST", f"/session/{sid}/permissions/per_x", f'{{"response": "reject", "message": "{lone}"}}'),
    ):
        response = _raw(client, method, path, body)
        assert response.status_code == 400, (method, path, response.text)
        family = "_tag" if path.startswith("/api/") else "name"
        assert "surrogate" in response.text and family in response.json(), (path, response.text)
        assert {path: client.get(path).json() for path in lists} == before, (method, path)


def test_surrogates_that_are_not_lone_are_text(client: httpx.Client) -> None:
    """A pair is one character (clients that escape everything send emoji so) and an escaped
    backslash before ``u`` is plain text: both are stored and listed back."""
    paired = _raw(client, "POST", "/session", '{"title": "\\ud83d\\ude00 \\\\ud800"}')
    assert paired.status_code == 200 and paired.json()["title"] == "\U0001f600 \\ud800"
    pty = _raw(client, "POST", "/pty", '{"title": "\\ud83d\\ude00"}').json()
    assert [p["title"] for p in client.get("/pty").json() if p["id"] == pty["id"]] == ["\U0001f600"]


@pytest.mark.parametrize(
    "body",
    [
        '{"title": "\ud800"}'.encode("utf-8", "surrogatepass"),  # a surrogate's own UTF-8 bytes
        '{"title": "\ud800"}'.encode("utf-16-le", "surrogatepass"),  # JSON in UTF-16, which Python reads
        b'{"title": "\xff"}',
    ],
)
def test_bodies_that_are_not_utf8_text_are_refused(client: httpx.Client, body: bytes) -> None:
    before = client.get("/pty").json()
    for path in ("/pty", "/session", "/api/pty"):
        response = client.post(path, content=body, headers=HEADERS)
        assert response.status_code == 400, (path, response.text)
    assert client.get("/pty").json() == before and client.get("/session").status_code == 200


def test_surrogates_percent_encoded_in_paths_queries_and_headers_arrive_replaced(client: httpx.Client) -> None:
    """A URL or header cannot smuggle one in: its bytes are decoded with replacement characters."""
    encoded = "%ED%A0%80"
    made = client.post(f"/session?directory=/tmp/{encoded}", json={})
    assert made.status_code == 200 and made.json()["directory"] == "/tmp/\ufffd\ufffd\ufffd"
    header = client.post("/session", headers={"x-opencode-directory": f"/tmp/x{encoded}"}, json={})
    assert header.status_code == 200 and "\ufffd" in header.json()["directory"]
    assert client.get(f"/session/ses_{encoded}").status_code in (400, 404)
    assert client.get(f"/session?search={encoded}").status_code == 200
    assert client.get("/session").status_code == 200 and client.get("/api/session").status_code == 200
