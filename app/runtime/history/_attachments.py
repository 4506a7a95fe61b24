"""Files in the history as the model receives them: the user's file parts and the attachments of
tool results, turned into the neutral content parts of ``ChatRequest``.

A ``data:`` URL is sent as it is. A ``file://`` URL (an @-mentioned or dropped project file) is
read now, at request time, confined to the project: images and PDFs become data URLs (bounded by
the read tool's attachment limit), text files and directories become what the read tool shows,
after OpenCode's synthetic "Called the Read tool" line. A file that cannot be read becomes a short
text note, never a failed turn. Whatever the model cannot take (``ModelInfo.modalities_input``) is
replaced by OpenCode's error text, so the model tells the user.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse
from urllib.request import url2pathname

from app.providers.base import ModelInfo
from app.providers.media import content_part, decode_data_url, is_media, modality, refusal
from app.runtime.errors import RuntimeFailure
from app.runtime.tools import ToolError, attachment, read_path
from app.runtime.workspace import confine

Part = dict[str, Any]


def _text(text: str) -> Part:
    return {"type": "text", "text": text}


def _attached(mime: str, filename: str | None) -> Part:
    """What the model learns of a file it cannot be sent (OpenCode's placeholder wording)."""
    return _text(f"[Attached {mime}: {filename or 'file'}]")


def media(model: ModelInfo, mime: str, url: str, filename: str | None) -> Part:
    """One image or document for ``model``: its content part, or the text that replaces it."""
    refused = refusal(model, mime, url, filename)
    if refused is not None:
        return _text(refused)
    if is_media(mime) and (url.startswith("data:") or mime.startswith("image/")):
        return content_part(mime, url, filename)
    return _attached(mime, filename)


def _read_call(args: dict[str, Any]) -> Part:
    return _text(f"Called the Read tool with the following input: {json.dumps(args, separators=(',', ':'))}")


def _line_range(url: str) -> dict[str, int]:
    """``?start=&end=`` of an @-mention of some lines, as the read tool's offset and limit."""
    query = parse_qs(urlparse(url).query)
    try:
        start = int(query["start"][0])
    except (KeyError, ValueError):
        return {}
    window = {"offset": max(start, 1)}
    end = query.get("end", [""])[0]
    if end.isdigit():
        window["limit"] = max(1, int(end) - (window["offset"] - 1))
    return window


def _project_file(part: Mapping[str, Any], root: Path, model: ModelInfo) -> list[Part]:
    mime, url = str(part.get("mime") or ""), str(part["url"])
    raw = url2pathname(urlparse(url).path)
    try:
        path = confine(root, raw)
        if is_media(mime) and not path.is_dir():
            call = _read_call({"filePath": str(path)})
            refused = refusal(model, mime, "", part.get("filename"))  # not read for nothing
            if refused is not None:
                return [call, _text(refused)]
            return [call, media(model, mime, attachment(path, mime)["url"], part.get("filename"))]
        window = {} if path.is_dir() else _line_range(url)
        result = read_path(path, **window)
    except (ToolError, RuntimeFailure, OSError) as exc:
        message = exc.message if isinstance(exc, RuntimeFailure) else str(exc)
        return [_text(f"Read tool failed to read {raw} with the following error: {message}")]
    pieces = [_read_call({"filePath": str(path), **window}), _text(result.output)]
    # An image or PDF mentioned as text (the TUI's @-mentions say text/plain) still goes as media.
    return pieces + [media(model, a["mime"], a["url"], part.get("filename")) for a in result.attachments]


def _file(part: Mapping[str, Any], root: Path, model: ModelInfo) -> list[Part]:
    mime, url, filename = str(part.get("mime") or ""), str(part.get("url") or ""), part.get("filename")
    if url.startswith("file:"):
        return _project_file(part, root, model)
    if url.startswith("data:") and modality(mime) is None:  # a pasted text file
        data = decode_data_url(url)
        text = data.decode("utf-8", errors="replace") if data is not None and b"\0" not in data else None
        if text is None:
            return [_attached(mime, filename)]
        return [_read_call({"filePath": filename} if filename else {}), _text(text)]
    return [media(model, mime, url, filename)]


def user_content(parts: Sequence[Mapping[str, Any]], directory: str, model: ModelInfo) -> str | list[Part]:
    """A user message's content: its text as one string when it has no files (as before
    attachments existed), else its parts in order with each file expanded."""
    if not any(p.get("type") == "file" for p in parts):
        return "".join(p.get("text", "") for p in parts if p.get("type") == "text" and not p.get("ignored"))
    root = Path(directory).resolve()
    content: list[Part] = []
    for part in parts:
        if part.get("type") == "file":
            content += _file(part, root, model)
        elif part.get("type") == "text" and not part.get("ignored") and part.get("text"):
            content.append(_text(part["text"]))
    return content


def tool_content(output: str, attachments: list[Part], model: ModelInfo) -> str | list[Part]:
    """A tool result: its output, followed by the images and PDFs it attached (data URLs only,
    as OpenCode), each replaced by the error text when ``model`` cannot take it."""
    files = [a for a in attachments if is_media(str(a.get("mime"))) and str(a.get("url")).startswith("data:")]
    if not files:
        return output
    return [_text(output), *(media(model, a["mime"], a["url"], a.get("filename")) for a in files)]
