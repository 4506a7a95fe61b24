"""Ids: OpenCode's format, unique, and in the order they were made (sessions: newest first),
including ids made in bulk and more than a millisecond holds."""

from __future__ import annotations

import re

from app import ids


def test_ids_made_one_by_one_and_in_bulk_sort_in_the_order_they_were_made() -> None:
    made = [ids.message_id(), *ids.ascending("message", 10_000), ids.message_id(), *ids.ascending("message", 3)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"msg_[0-9a-f]{12}[0-9A-Za-z]{14}", made_id) for made_id in made)
    assert ids.ascending("part", 0) == []


def test_session_ids_sort_newest_first() -> None:
    sessions = [ids.session_id() for _ in range(5_000)]  # more than one millisecond's counter
    assert sessions == sorted(sessions, reverse=True)
    assert all(session.startswith("ses_") and len(session) == 30 for session in sessions)
