"""``POST /opensession/import`` reads its body as a stream, under a limit of its own: a body
over the request limit is imported, one over the import limit is a 413 however it is sent, and
the body is checked as every body is (UTF-8 JSON text, nothing the server cannot store), a
message at a time. The reader underneath is checked with chunks of a few bytes, so every value
crosses a chunk's end."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.runtime.history import _export_file
from app.settings import Settings
from tests.servers import thread_server

JSON = {"content-type": "application/json"}


def _export(messages: int, text: str = "x") -> dict[str, Any]:
    session = "ses_0000000000000000000000import"
    listed = []
    for index in range(messages):
        message = f"msg_{index:026d}"
        info = {"id": message, "sessionID": session, "role": "user", "time": {"created": 1000 + index}}
        part = {"id": f"prt_{index:026d}", "sessionID": session, "messageID": message, "type": "text", "text": text}
        listed.append({"info": info, "parts": [part]})
    return {"info": {"id": session, "title": "long", "time": {"created": 1000, "updated": 1000}}, "messages": listed}


def _chunked(body: bytes) -> Iterator[bytes]:
    """A body without a declared length (``Transfer-Encoding: chunked``)."""
    for start in range(0, len(body), 65536):
        yield body[start : start + 65536]


@pytest.fixture
def client(settings: Settings) -> Iterator[httpx.Client]:
    """A server whose limits are small: 64 KB for a request, 1 MB for an import."""
    limited = settings.model_copy(update={"max_body_bytes": 65536, "max_import_bytes": 1 << 20})
    with thread_server(limited) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def test_an_import_over_the_request_limit_is_read_as_a_stream(client: httpx.Client) -> None:
    export = _export(40, "y" * 8000)  # about 350 KB: over the request limit, under the import's
    body = json.dumps(export, indent=2).encode()
    for sent in (body, _chunked(body)):
        answer = client.post("/opensession/import", content=sent, headers=JSON)
        assert answer.status_code == 200, answer.text
        session = answer.json()["id"]
        assert client.get(f"/session/{session}/message").json() == export["messages"]
        assert client.delete(f"/session/{session}").status_code == 200


def test_an_import_over_its_own_limit_is_refused_however_it_is_sent(client: httpx.Client) -> None:
    body = json.dumps(_export(150, "z" * 8000)).encode()  # about 1.3 MB
    for sent in (body, _chunked(body)):
        answer = client.post("/opensession/import", content=sent, headers=JSON)
        assert answer.status_code == 413
        assert answer.json()["data"]["message"] == f"Request body exceeds {1 << 20} bytes"
    assert client.get("/session").json() == []


INFO = b'"info": {"id": "ses_x", "title": "t", "time": {"created": 1, "updated": 1}}'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"info": {"id": "ses_x", "title": "\\ud800", "time": {"created": 1, "updated": 1}}}', "surrogate"),
        (b"{" + INFO + b', "messages": [NaN]}', "NaN is not JSON"),
        (b'{"info": {"id": "ses_x", "title": "\xff"}}', "invalid UTF-8 at byte 35"),
        (b"{" + INFO + b", " + INFO + b"}", "info appears twice"),
        (b"{" + INFO + b', "messages": [{}', "not JSON"),
        (b"{" + INFO + b"}", "messages: Field required"),
    ],
)
def test_an_import_is_checked_as_every_body_is(client: httpx.Client, body: bytes, expected: str) -> None:
    answer = client.post("/opensession/import", content=body, headers=JSON)
    assert answer.status_code == 400 and expected in answer.json()["data"]["message"], answer.text
    assert client.get("/session").json() == []


def _read(data: bytes) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in _export_file.members(io.BytesIO(data)):
        found[name] = list(value) if isinstance(value, _export_file.Elements) else value
    return found


def test_the_reader_gives_back_what_json_reads_across_any_chunk_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_export_file, "CHUNK", 7)
    documents = [
        {
            "info": {"n": 123456789012, "f": -1.5e10, "s": 'a"b\\ \u00e9\u4e2d\U0001f600'},
            "messages": [{"a": [1, {}]}, 12345678901],
        },
        {"messages": [], "info": {}, "other": [True, None]},
        {},
    ]
    for document in documents:
        for indent in (None, 2):
            assert _read(json.dumps(document, indent=indent, ensure_ascii=False).encode()) == document
    for bad in (b'{"a": 1,}', b'{"a": 1} 2', b'{"messages": [1,]}', b'{"a": "open', b'{"a": 1', b"[1]", b""):
        with pytest.raises(_export_file.ExportSyntax):
            _read(bad)
