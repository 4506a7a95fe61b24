"""Attachments in a ``ChatRequest``: the neutral content parts for images and documents, data
URLs, and what a model that cannot take a kind of input gets instead (OpenCode's
``ProviderTransform.unsupportedParts``: a text part telling the model to inform the user)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from app.providers.base import ModelInfo

_DATA_URL = re.compile(r"^data:([^;,]*)(;base64)?,(.*)$", re.S)
EMPTY_IMAGE = "ERROR: Image file is empty or corrupted. Please provide a valid image."
# What a tool result's media is introduced with when it travels in a user message.
TOOL_ATTACHMENTS_PROMPT = "Attached image(s) from tool result:"


def modality(mime: str) -> str | None:
    """The models.dev input modality a MIME type needs (None: plain text or unknown)."""
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/"):
        return "audio"
    if mime.startswith("video/"):
        return "video"
    if mime == "application/pdf":
        return "pdf"
    return None


def is_media(mime: str) -> bool:
    """Images and PDFs: the attachments our providers can send as content parts."""
    return modality(mime) in ("image", "pdf")


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def split_data_url(url: str) -> tuple[str, str] | None:
    """``(mime, base64 payload)`` of a base64 data URL, else None."""
    match = _DATA_URL.match(url)
    if not match or not match.group(2):
        return None
    return match.group(1), match.group(3)


def decode_data_url(url: str) -> bytes | None:
    """The bytes a data URL holds (base64 or percent-less plain text), None if it is not one."""
    match = _DATA_URL.match(url)
    if not match:
        return None
    if not match.group(2):
        return match.group(3).encode()
    try:
        return base64.b64decode(match.group(3), validate=False)
    except binascii.Error:
        return None


def content_part(mime: str, url: str, filename: str | None) -> dict[str, Any]:
    """A data URL as the neutral part ``ChatRequest`` documents: ``image_url`` for images,
    ``file`` for the rest (PDFs)."""
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "file", "file": {"filename": filename or _default_name(mime), "file_data": url}}


def _default_name(mime: str) -> str:
    return "document.pdf" if mime == "application/pdf" else "file"


def refusal(model: ModelInfo, mime: str, url: str, filename: str | None) -> str | None:
    """The text that replaces an attachment ``model`` cannot take (OpenCode's wording), or None
    when it can take it."""
    kind = modality(mime)
    if kind is None:
        return None
    if kind == "image":
        parts = split_data_url(url)
        if parts is not None and not parts[1]:
            return EMPTY_IMAGE
    if kind in model.modalities_input:
        return None
    name = f'"{filename}"' if filename else kind
    return f"ERROR: Cannot read {name} (this model does not support {kind} input). Inform the user."
