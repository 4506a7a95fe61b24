"""A session's window kept decoded between reads (``app.store.queries.DecodedWindows``): a
message is reused only while its stored text is the same, a changed one is decoded again, one
gone is dropped, and only the most recent sessions are kept."""

from __future__ import annotations

import json

import pytest

from app.store import queries
from app.store.queries import DecodedWindows, RawMessage


def _raw(message_id: str, text: str, *parts: str) -> RawMessage:
    info = json.dumps({"id": message_id, "text": text})
    return RawMessage(message_id, info, [json.dumps({"type": "text", "text": p}) for p in parts])


def test_an_unchanged_message_is_reused_and_a_changed_one_decoded_again() -> None:
    windows = DecodedWindows()
    first = windows.of("s1", {"m1": _raw("m1", "a", "x"), "m2": _raw("m2", "b", "y")})
    assert first == [
        {"info": {"id": "m1", "text": "a"}, "parts": [{"type": "text", "text": "x"}]},
        {"info": {"id": "m2", "text": "b"}, "parts": [{"type": "text", "text": "y"}]},
    ]
    # m1 as it was, m2's part grew (a reply still streaming), m3 new.
    second = windows.of("s1", {"m1": _raw("m1", "a", "x"), "m2": _raw("m2", "b", "yz"), "m3": _raw("m3", "c")})
    assert second[0] is first[0]
    assert second[1] is not first[1] and second[1]["parts"] == [{"type": "text", "text": "yz"}]
    assert dict(second[2]) == {"info": {"id": "m3", "text": "c"}, "parts": []}
    # A message whose info changed (its reply finished) is decoded again too; one gone is dropped.
    third = windows.of("s1", {"m2": _raw("m2", "B", "yz")})
    assert third == [{"info": {"id": "m2", "text": "B"}, "parts": [{"type": "text", "text": "yz"}]}]
    assert windows.of("s1", {"m1": _raw("m1", "a", "x")})[0] is not first[0]  # not kept once gone


def test_only_the_most_recently_read_sessions_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "KEPT_WINDOWS", 2)
    windows = DecodedWindows()
    kept = {sid: windows.of(sid, {"m": _raw("m", sid)})[0] for sid in ("s1", "s2")}
    assert windows.of("s1", {"m": _raw("m", "s1")})[0] is kept["s1"]  # s1 is now the most recent
    windows.of("s3", {"m": _raw("m", "s3")})  # over the limit: s2, read least recently, goes
    assert windows.of("s1", {"m": _raw("m", "s1")})[0] is kept["s1"]
    assert windows.of("s2", {"m": _raw("m", "s2")})[0] is not kept["s2"]


def test_the_text_kept_is_bounded_and_a_window_over_the_bound_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    one = _raw("m", "s1", "x" * 100)
    size = len(one.info) + len(one.parts[0])
    monkeypatch.setattr(queries, "KEPT_TEXT", 2 * size + 10)
    windows = DecodedWindows()
    kept = {sid: windows.of(sid, {"m": _raw("m", "s1", "x" * 100)})[0] for sid in ("a", "b")}
    windows.of("c", {"m": _raw("m", "s1", "x" * 100)})  # a third as large: a, the least recent, goes
    assert windows.of("b", {"m": _raw("m", "s1", "x" * 100)})[0] is kept["b"]
    assert windows.of("a", {"m": _raw("m", "s1", "x" * 100)})[0] is not kept["a"]
    big = {"m": _raw("m", "big", "y" * 1000)}
    first = windows.of("big", big)[0]
    assert windows.of("big", big)[0] is not first  # larger than the bound: never kept
