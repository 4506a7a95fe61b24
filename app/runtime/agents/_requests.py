"""Requests that wait for the user (permission asks, questions), as every process of a cluster
lists them: the ones asked here, whose askers wait on them, and the ones asked on other
processes, followed from their relayed events so a reply can be sent where the asker waits.

A request asked elsewhere is forgotten when it is settled, or when its tool part closes (the
process that asked died and the one taking its sessions over failed the tool): a request lives
only while its tool runs.

A request belongs to the directory of the session that asked it, as in OpenCode, whose instance
is one directory: read or answered from another directory it does not exist there (the same
not-found as an unknown id), so one project's client never sees or settles another's requests."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from app.events.model import Event


class Asked(Protocol):
    info: dict[str, Any]
    directory: str | None  # the asking session's: the instance the request belongs to


@dataclass
class Relayed:
    """A request asked on another process, as its event told it."""

    info: dict[str, Any]
    directory: str | None


P = TypeVar("P", bound=Asked)


class PendingRequests(ABC, Generic[P]):
    ASKED: ClassVar[str]  # the event announcing a request
    SETTLED: ClassVar[tuple[str, ...]]  # the events settling one

    def __init__(self) -> None:
        self._pending: dict[str, P] = {}  # asked here, by id
        self._elsewhere: dict[str, Relayed] = {}  # asked on other processes, by id

    @abstractmethod
    def not_found(self, request_id: str) -> Exception:
        """The error for an id that names no pending request (each kind has its own)."""

    def observe(self, event: Event) -> None:
        """Follow requests asked on other processes (``is_local`` tells where to send a reply)."""
        props = event.properties
        if event.type == self.ASKED:
            self._elsewhere[props["id"]] = Relayed(props, event.directory)
        elif event.type in self.SETTLED:
            self._elsewhere.pop(props["requestID"], None)
        elif event.type == "message.part.updated":
            part = props.get("part") or {}
            if part.get("type") == "tool" and part.get("state", {}).get("status") in ("completed", "error"):
                ref = {"messageID": part.get("messageID"), "callID": part.get("callID")}
                for request_id in [rid for rid, asked in self._elsewhere.items() if asked.info.get("tool") == ref]:
                    del self._elsewhere[request_id]

    def is_local(self, request_id: str) -> bool:
        return request_id in self._pending

    def _requests(self) -> Iterator[Asked]:
        yield from self._pending.values()
        yield from (asked for rid, asked in self._elsewhere.items() if rid not in self._pending)

    def pending(self, session_id: str | None = None, *, directory: str | None = None) -> list[dict[str, Any]]:
        """Requests waiting for a reply: of one session, of one directory, or (None) all."""
        return [
            asked.info
            for asked in self._requests()
            if (session_id is None or asked.info["sessionID"] == session_id)
            and (directory is None or asked.directory == directory)
        ]

    def get(self, request_id: str, *, session_id: str | None = None, directory: str | None = None) -> dict[str, Any]:
        """The request ``request_id``, if it is pending in ``session_id`` and ``directory`` (when
        given); otherwise the kind's not-found error."""
        asked: Asked | None = self._pending.get(request_id) or self._elsewhere.get(request_id)
        if (
            asked is None
            or (session_id is not None and asked.info["sessionID"] != session_id)
            or (directory is not None and asked.directory != directory)
        ):
            raise self.not_found(request_id)
        return asked.info
