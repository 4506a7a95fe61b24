"""A real SSE client for tests: reads a stream in a background thread and records every frame."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Frame:
    id: str | None
    data: dict[str, Any]

    @property
    def type(self) -> str:
        payload = self.data.get("payload", self.data)
        return str(payload.get("type"))

    @property
    def properties(self) -> dict[str, Any]:
        payload = self.data.get("payload", self.data)
        return payload.get("properties") or payload.get("data") or {}


def first_frame(url: str, headers: dict[str, str] | None = None) -> Frame:
    """Connect, read one frame, drop the connection (a client that loses its network at once)."""
    frame_id: str | None = None
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client, client.stream("GET", url, headers=headers) as response:
        for line in response.iter_lines():
            if line.startswith("id:"):
                frame_id = line[3:].strip()
            elif line.startswith("data:"):
                return Frame(frame_id, json.loads(line[5:].strip()))
    raise EOFError(f"{url} ended before its first frame")


class EventCollector:
    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.frames: list[Frame] = []
        self.response_headers: httpx.Headers | None = None
        self.status: int | None = None
        self.ended = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Condition()
        self._client = httpx.Client(timeout=httpx.Timeout(60.0, read=None))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError(f"no response from {url}")

    def _run(self) -> None:
        try:
            with self._client.stream("GET", self.url, headers=self.headers) as response:
                self.status = response.status_code
                self.response_headers = response.headers
                self._ready.set()
                frame_id: str | None = None
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        frame_id = line[3:].strip()
                    elif line.startswith("data:"):
                        frame = Frame(frame_id, json.loads(line[5:].strip()))
                        with self._lock:
                            self.frames.append(frame)
                            self._lock.notify_all()
                    elif line == "":
                        frame_id = None
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self._ready.set()
            self.ended.set()
            with self._lock:
                self._lock.notify_all()

    def wait_for(self, predicate: Callable[[Frame], bool], timeout: float = 10.0) -> Frame:
        deadline = time.monotonic() + timeout
        with self._lock:
            seen = 0
            while True:
                for frame in self.frames[seen:]:
                    if predicate(frame):
                        return frame
                seen = len(self.frames)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.ended.is_set():
                    types = [f.type for f in self.frames]
                    raise TimeoutError(f"no matching frame; saw {types}")
                self._lock.wait(remaining)

    def wait_idle(self, session_id: str, timeout: float = 10.0) -> Frame:
        return self.wait_for(
            lambda f: f.type == "session.idle" and f.properties.get("sessionID") == session_id, timeout
        )

    def snapshot(self) -> list[Frame]:
        """Every frame received so far, in order."""
        with self._lock:
            return list(self.frames)

    def of_session(self, session_id: str) -> list[Frame]:
        with self._lock:
            return [f for f in self.frames if f.properties.get("sessionID") == session_id]

    def close(self) -> None:
        """Stop watching. A blocked read cannot be interrupted portably, so the reader thread
        (a daemon) ends when the server closes the stream at teardown."""

    def __enter__(self) -> EventCollector:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
