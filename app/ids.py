"""Identifier generation in OpenCode's format: ``<prefix>_<12 hex><14 base62>``.

The 12 hex digits are ``now_ms * 4096 + counter`` (48 bits), so ids from one process are strictly
monotonic; session ids invert those bits so that newer sessions sort first. Clients only ever check
the prefix, so the prefix is what validation enforces.
"""

from __future__ import annotations

import os
import threading
import time

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# byte -> base62 character (byte % 62), for bytes.translate: one C call per id suffix.
_BYTE_TO_BASE62 = bytes(ord(_BASE62[b % 62]) for b in range(256))
_MASK48 = (1 << 48) - 1

PREFIXES = {
    "session": "ses",
    "message": "msg",
    "part": "prt",
    "event": "evt",
    "permission": "per",
    "question": "que",
    "workspace": "wrk",
    "pty": "pty",
}

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _next_value() -> int:
    global _last_ms, _counter
    with _lock:
        now = int(time.time() * 1000)
        if now > _last_ms:
            _last_ms, _counter = now, 0
        _counter += 1
        if _counter >= 0x1000:  # more than 4095 ids in one ms: borrow the next millisecond
            _last_ms, _counter = _last_ms + 1, 1
        return _last_ms * 0x1000 + _counter


def new_id(kind: str, *, descending: bool = False) -> str:
    prefix = PREFIXES[kind]
    value = _next_value()
    if descending:
        value = ~value
    head = (value & _MASK48).to_bytes(6, "big").hex()
    tail = os.urandom(14).translate(_BYTE_TO_BASE62).decode()
    return f"{prefix}_{head}{tail}"


def session_id() -> str:
    return new_id("session", descending=True)


def message_id() -> str:
    return new_id("message")


def part_id() -> str:
    return new_id("part")


def event_id() -> str:
    return new_id("event")


def has_prefix(value: str, kind: str) -> bool:
    return isinstance(value, str) and value.startswith(PREFIXES[kind] + "_") and len(value) > 4
