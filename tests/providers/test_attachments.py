"""Images and PDFs reach the model: pasted (data URLs) and project files (``file://``) in user
messages, and the read tool's attachments in tool results, through the real server to local stubs
of Anthropic's Messages API and OpenAI chat completions. Models that cannot take a kind of input
get OpenCode's error text instead, and a file that cannot be read never fails the turn."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.providers import catalog
from tests.anthropic_stub import MODEL_ID, Answer, Stub, anthropic_stub, message, text, title_or, tool_use
from tests.helpers import assistant_text, create_session
from tests.servers import OpenAIStub, StubReply, openai_stub

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _png() -> bytes:
    """A real 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _pdf() -> bytes:
    """A real one-page PDF (with its cross-reference table)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


PNG, PDF = _png(), _pdf()
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF_DATA = base64.b64encode(PDF).decode()


def _prompt(question: str, *files: dict[str, Any]) -> dict[str, Any]:
    return {"parts": [{"type": "text", "text": question}, *({"type": "file", **f} for f in files)]}


def _pasted_png() -> dict[str, Any]:
    return {"mime": "image/png", "url": PNG_URL, "filename": "pixel.png"}


def _project_file(path: Path, mime: str) -> dict[str, Any]:
    return {"mime": mime, "url": path.as_uri(), "filename": path.name}


def _read_call(path: Path) -> dict[str, str]:
    return {"type": "text", "text": f'Called the Read tool with the following input: {{"filePath":"{path}"}}'}


def _refusal(name: str, kind: str) -> dict[str, str]:
    return {
        "type": "text",
        "text": f"ERROR: Cannot read {name} (this model does not support {kind} input). Inform the user.",
    }


def _ask(client: httpx.Client, prompt: dict[str, Any]) -> dict[str, Any]:
    sid = create_session(client)["id"]
    reply = client.post(f"/session/{sid}/message", json=prompt).json()
    assert "error" not in reply["info"], reply["info"]
    return reply


# -- Anthropic ---------------------------------------------------------------------------------


@pytest.fixture
def anthropic(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    with anthropic_stub(monkeypatch) as handle:
        # A model of our own naming: the catalog does not know it, so opencode.json says what it takes.
        models = {MODEL_ID: {"modalities": {"input": ["text", "image", "pdf"], "output": ["text"]}}}
        config = {"model": f"anthropic/{MODEL_ID}", "provider": {"anthropic": {"models": models}}}
        (project_dir / "opencode.json").write_text(json.dumps(config))
        yield handle


def test_pasted_png_reaches_anthropic_as_an_image_block(anthropic: Stub, client: httpx.Client) -> None:
    reply = _ask(client, _prompt("what is this?", _pasted_png()))
    assert assistant_text(reply) == "Hello there"
    [request] = anthropic.chat()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_URL.split(",")[1]}}
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]


def test_project_pdf_reaches_anthropic_as_a_document_block(
    anthropic: Stub, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "docs").mkdir()
    pdf = project_dir / "docs" / "spec.pdf"
    pdf.write_bytes(PDF)
    reply = _ask(client, _prompt("summarize", _project_file(pdf, "application/pdf")))
    [request] = anthropic.chat()
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_DATA},
        "title": "spec.pdf",
    }
    assert request["messages"][0]["content"] == [{"type": "text", "text": "summarize"}, _read_call(pdf), document]
    # What clients list is what they sent: the file part keeps its file:// URL.
    user = client.get(f"/session/{reply['info']['sessionID']}/message").json()[0]
    assert [p["url"] for p in user["parts"] if p["type"] == "file"] == [pdf.as_uri()]


def test_catalog_model_without_pdf_input_gets_the_error_text(
    anthropic: Stub, client: httpx.Client, project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The catalog lists text and image as this model's input (set here: today's Claude models
    # all take PDFs): the PDF is replaced.
    known = catalog.model("anthropic", "claude-sonnet-4-20250514")
    assert known is not None
    monkeypatch.setitem(known, "modalities", {"input": ["text", "image"], "output": ["text"]})
    (project_dir / "opencode.json").write_text(json.dumps({"model": "anthropic/claude-sonnet-4-20250514"}))
    pdf = project_dir / "spec.pdf"
    pdf.write_bytes(PDF)
    _ask(client, _prompt("summarize", _project_file(pdf, "application/pdf"), _pasted_png()))
    [request] = anthropic.chat()
    content = request["messages"][0]["content"]
    assert content[:3] == [{"type": "text", "text": "summarize"}, _read_call(pdf), _refusal('"spec.pdf"', "pdf")]
    assert content[3]["type"] == "image"  # images it does take


def test_read_tool_returns_an_image_that_reaches_anthropic_in_the_tool_result(
    anthropic: Stub, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "pixel.png").write_bytes(PNG)

    def answer(body: dict[str, Any]) -> Answer:
        if any(block["type"] == "tool_result" for block in body["messages"][-1]["content"]):
            return Answer(message(text(0, "A green pixel.")))
        return Answer(message(tool_use(0, "toolu_1", "read", json.dumps({"filePath": "pixel.png"})), stop="tool_use"))

    anthropic.answer = title_or(answer)
    reply = _ask(client, _prompt("look at pixel.png"))
    assert assistant_text(reply) == "A green pixel."
    [result] = anthropic.chat()[1]["messages"][-1]["content"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_URL.split(",")[1]}}
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert result["content"] == [{"type": "text", "text": "Image read successfully"}, image]
    history = client.get(f"/session/{reply['info']['sessionID']}/message").json()
    tool = next(p for p in history[1]["parts"] if p["type"] == "tool")
    assert [(a["mime"], a["url"]) for a in tool["state"]["attachments"]] == [("image/png", PNG_URL)]


# -- OpenAI chat completions ---------------------------------------------------------------------


def _configure(directory: Path, base_url: str, **model: Any) -> None:
    models = {"vision": {"name": "Vision", **model}}
    provider = {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": base_url, "apiKey": "k"}, "models": models}
    (directory / "opencode.json").write_text(json.dumps({"model": "stub/vision", "provider": {"stub": provider}}))


@pytest.fixture
def openai(project_dir: Path) -> Iterator[OpenAIStub]:
    with openai_stub() as handle:
        _configure(project_dir, handle.url, modalities={"input": ["text", "image", "pdf"], "output": ["text"]})
        yield handle


def _turns(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r for r in stub.requests if "title generator" not in r["messages"][0]["content"]]


def test_png_and_pdf_reach_openai_chat_as_content_parts(
    openai: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    pdf = project_dir / "spec.pdf"
    pdf.write_bytes(PDF)
    _ask(client, _prompt("compare", _pasted_png(), _project_file(pdf, "application/pdf")))
    [request] = _turns(openai)
    assert request["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "compare"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
            _read_call(pdf),
            {"type": "file", "file": {"filename": "spec.pdf", "file_data": f"data:application/pdf;base64,{PDF_DATA}"}},
        ],
    }


def test_model_configured_without_image_input_gets_the_error_text(
    openai: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    _configure(project_dir, openai.url, modalities={"input": ["text"], "output": ["text"]})
    _ask(client, _prompt("what is this?", _pasted_png()))
    [request] = _turns(openai)
    content = request["messages"][-1]["content"]
    assert content == [{"type": "text", "text": "what is this?"}, _refusal('"pixel.png"', "image")]


def test_read_tool_image_follows_the_tool_results_in_a_user_message(
    openai: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    (project_dir / "pixel.png").write_bytes(PNG)
    call = {"id": "call_1", "name": "read", "arguments": json.dumps({"filePath": "pixel.png"})}
    openai.reply = lambda body: (
        StubReply(content=[], tool_calls=[call])
        if body["messages"][-1]["content"] == "look at pixel.png"
        else StubReply(content=["A pixel."])
    )
    _ask(client, _prompt("look at pixel.png"))
    second = _turns(openai)[1]["messages"]
    assert second[-2] == {"role": "tool", "tool_call_id": "call_1", "content": "Image read successfully"}
    assert second[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attached image(s) from tool result:"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
        ],
    }


def test_text_file_mention_is_read_into_the_prompt(openai: OpenAIStub, client: httpx.Client, project_dir: Path) -> None:
    notes = project_dir / "notes.txt"
    notes.write_text("first\nsecond\nthird\n")
    ranged = {"mime": "text/plain", "url": notes.as_uri() + "?start=2&end=3", "filename": "notes.txt"}
    _ask(client, _prompt("explain", ranged))
    [request] = _turns(openai)
    content = request["messages"][-1]["content"]
    args = json.dumps({"filePath": str(notes), "offset": 2, "limit": 2}, separators=(",", ":"))
    call = f"Called the Read tool with the following input: {args}"
    assert content[:2] == [{"type": "text", "text": "explain"}, {"type": "text", "text": call}]
    assert "2: second\n3: third" in content[2]["text"] and "1: first" not in content[2]["text"]


def test_unreadable_files_become_a_note_and_the_turn_goes_on(
    openai: OpenAIStub, client: httpx.Client, project_dir: Path, tmp_path: Path
) -> None:
    missing = project_dir / "gone.png"
    outside = tmp_path / "secret.pdf"
    outside.write_bytes(PDF)
    reply = _ask(
        client,
        _prompt("look", _project_file(missing, "image/png"), _project_file(outside, "application/pdf")),
    )
    assert assistant_text(reply) == "Hello from stub"
    [request] = _turns(openai)
    first, gone, secret = request["messages"][-1]["content"]
    assert first == {"type": "text", "text": "look"}
    assert gone["type"] == "text" and gone["text"].startswith(f"Read tool failed to read {missing}")
    assert "No such file" in gone["text"] or "not found" in gone["text"]
    assert secret["type"] == "text" and "outside the project directory" in secret["text"]
    assert PDF_DATA not in json.dumps(request)


def test_image_mentioned_as_text_and_pasted_text_file(
    openai: OpenAIStub, client: httpx.Client, project_dir: Path
) -> None:
    # The TUI's @-mentions say text/plain whatever the file; a PNG still goes as an image.
    (project_dir / "pixel.png").write_bytes(PNG)
    pasted = {"mime": "text/plain", "url": "data:text/plain;base64,aGVsbG8=", "filename": "clip.txt"}
    _ask(client, _prompt("and these?", _project_file(project_dir / "pixel.png", "text/plain"), pasted))
    [request] = _turns(openai)
    assert request["messages"][-1]["content"] == [
        {"type": "text", "text": "and these?"},
        _read_call(project_dir / "pixel.png"),
        {"type": "text", "text": "Image read successfully"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "text", "text": 'Called the Read tool with the following input: {"filePath":"clip.txt"}'},
        {"type": "text", "text": "hello"},
    ]


# -- The offline echo model ----------------------------------------------------------------------


def test_echo_model_takes_text_only_and_says_so(client: httpx.Client) -> None:
    reply = _ask(client, _prompt("what is this?", _pasted_png()))
    assert assistant_text(reply) == (
        'Echo: what is this?\nERROR: Cannot read "pixel.png" (this model does not support image input). '
        "Inform the user."
    )


def test_anthropic_gets_a_note_for_image_types_it_refuses(database_url: str) -> None:
    # (no server: ``database_url`` is only here because the module's parametrization names it)
    from app.providers.anthropic import anthropic_messages

    parts = [
        {"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}},
        {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
    ]
    [user] = anthropic_messages([{"role": "user", "content": parts}])
    refused = "not sent, the model takes JPEG, PNG, GIF and WebP images]"
    assert [b.get("text", "").split(": ", 1)[-1] for b in user["content"][:2]] == [refused, refused]
    assert user["content"][2] == {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}}
