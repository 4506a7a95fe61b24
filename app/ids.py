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
    "credential": "cred",
}

_TAIL = 14
# Random bytes are drawn from the OS this many ids at a time: a getrandom() call per id was most
# of an id's cost (system calls are slow here).
_POOL_IDS = 256

_lock = threading.Lock()
_last_value = 0  # the last value handed out: now_ms * 4096 + a counter
_pool = b""
_pool_at = 0


def _forget_pool() -> None:
    """A forked child must not hand out its parent's random tails."""
    global _pool, _pool_at
    _pool, _pool_at = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def _reserve(count: int) -> tuple[int, bytes]:
    """The first of ``count`` consecutive monotonic values, and their random tails (``count``
    runs of base62 characters), under one lock. More than 4095 values in one millisecond borrow
    the next millisecond's."""
    global _last_value, _pool, _pool_at
    with _lock:
        first = max(int(time.time() * 1000) * 0x1000, _last_value) + 1
        _last_value = first + count - 1
        size = _TAIL * count
        if _pool_at + size > len(_pool):
            _pool, _pool_at = os.urandom(_TAIL * max(_POOL_IDS, count)).translate(_BYTE_TO_BASE62), 0
        tails = _pool[_pool_at : _pool_at + size]
        _pool_at += size
        return first, tails


def new_id(kind: str, *, descending: bool = False) -> str:
    prefix = PREFIXES[kind]
    value, tail = _reserve(1)
    if descending:
        value = ~value
    return f"{prefix}_{value & _MASK48:012x}{tail.decode()}"


def ascending(kind: str, count: int) -> list[str]:
    """``count`` ascending ids of ``kind`` in one go (bulk copies: one lock and clock read)."""
    prefix = PREFIXES[kind]
    first, tails = _reserve(count)
    text = tails.decode()
    return [f"{prefix}_{(first + i) & _MASK48:012x}{text[i * _TAIL : (i + 1) * _TAIL]}" for i in range(count)]


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
