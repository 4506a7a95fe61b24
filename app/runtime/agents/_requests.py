"""Requests that wait for the user (permission asks, questions), as every process of a cluster
lists them: the ones asked here, whose askers wait on them, and the ones asked on other
processes, followed from their relayed events so a reply can be sent where the asker waits.

A request asked elsewhere is forgotten when it is settled, or when its tool part closes (the
process that asked died and the one taking its sessions over failed the tool): a request lives
only while its tool runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from app.events.model import Event


class Asked(Protocol):
    info: dict[str, Any]


P = TypeVar("P", bound=Asked)


class PendingRequests(ABC, Generic[P]):
    ASKED: ClassVar[str]  # the event announcing a request
    SETTLED: ClassVar[tuple[str, ...]]  # the events settling one

    def __init__(self) -> None:
        self._pending: dict[str, P] = {}  # asked here, by id
        self._elsewhere: dict[str, dict[str, Any]] = {}  # asked on other processes, by id

    @abstractmethod
    def not_found(self, request_id: str) -> Exception:
        """The error for an id that names no pending request (each kind has its own)."""

    def observe(self, event: Event) -> None:
        """Follow requests asked on other processes (``is_local`` tells where to send a reply)."""
        props = event.properties
        if event.type == self.ASKED:
            self._elsewhere[props["id"]] = props
        elif event.type in self.SETTLED:
            self._elsewhere.pop(props["requestID"], None)
        elif event.type == "message.part.updated":
            part = props.get("part") or {}
            if part.get("type") == "tool" and part.get("state", {}).get("status") in ("completed", "error"):
                ref = {"messageID": part.get("messageID"), "callID": part.get("callID")}
                for request_id in [rid for rid, info in self._elsewhere.items() if info.get("tool") == ref]:
                    del self._elsewhere[request_id]

    def is_local(self, request_id: str) -> bool:
        return request_id in self._pending

    def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        local = [p.info for p in self._pending.values()]
        infos = local + [info for rid, info in self._elsewhere.items() if rid not in self._pending]
        return [info for info in infos if session_id is None or info["sessionID"] == session_id]

    def get(self, request_id: str, *, session_id: str | None = None) -> dict[str, Any]:
        pending = self._pending.get(request_id)
        info = pending.info if pending is not None else self._elsewhere.get(request_id)
        if info is None or (session_id is not None and info["sessionID"] != session_id):
            raise self.not_found(request_id)
        return info
