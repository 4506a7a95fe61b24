"""One server of the fleet (opensession or OpenCode 1.x, through the legacy routes both serve) and
the one long-lived session the fleet keeps on it.

Invariants: the node's session is created on first use and replaced when the server answers 404
for it (the old one is never deleted); every failure is a ``NodeError`` naming the node, never
an httpx exception; a prompt is followed by a task on the session's ``/event`` stream, opened
before the prompt is sent, that lives until the session is idle again (so a ``send_message``
whose wait ran out leaves the turn observed, and the node reports busy until it ends)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from app.cli.client import auth, error_message, json_body
from app.cli.common import NON_INTERACTIVE_RULES
from app.cli.fleet.results import Created, Interrupted, Reply, Reset, Status, Transcript
from app.cli.fleet.transcript import Turn, compact_message

REQUEST_SECONDS = 30.0
SUBSCRIBE_SECONDS = 15.0
INTERRUPT_SETTLE_SECONDS = 10.0  # how long interrupt_session waits for the session to be idle
POLL_SECONDS = 0.05


class NodeError(Exception):
    """A failure to report to the calling agent as one line (a tool result with isError)."""


class SessionGone(NodeError):
    """The server answered 404 for the node's session (deleted behind the fleet's back)."""


@dataclass
class Session:
    id: str
    directory: str | None


@dataclass
class Following:
    """A turn followed on the event stream by ``task``; ``done`` once the turn is over, the
    stream failed (``failure`` says why) or the follower was stopped."""

    turn: Turn
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    failure: str | None = None
    task: asyncio.Task[None] | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.done.set()


class Node:
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, auth=auth(), timeout=httpx.Timeout(REQUEST_SECONDS, connect=10.0))
        self.session: Session | None = None
        self.following: Following | None = None
        self._creating = asyncio.Lock()

    async def close(self) -> None:
        if self.following is not None:
            self.following.stop()
        await self.http.aclose()

    # -- HTTP ------------------------------------------------------------------------------------

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the decoded JSON body (None when empty). 404 on a session route is
        SessionGone, every other failure a NodeError."""
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise NodeError(f"node {self.name}: cannot reach {self.url}: {exc or type(exc).__name__}") from None
        if response.status_code == 401:
            raise NodeError(f"node {self.name}: {self.url} refused the credentials (set OPENCODE_SERVER_PASSWORD)")
        if response.status_code == 404 and path.startswith("/session/") and path != "/session/status":
            raise SessionGone(f"node {self.name}: {error_message(response)}")
        if response.status_code >= 400:
            raise NodeError(f"node {self.name}: {method} {path}: {error_message(response)}")
        try:
            return json_body(response)
        except ValueError:
            raise NodeError(f"node {self.name}: {self.url} has no {path} (not an OpenCode server?)") from None

    # -- the node's session ----------------------------------------------------------------------

    async def new_session(self) -> Session:
        """Create a session and make it the node's (the previous one stays on the server)."""
        info = await self._request("POST", "/session", json={"permission": NON_INTERACTIVE_RULES})
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            raise NodeError(f"node {self.name}: POST /session did not answer a session")
        self.session = Session(info["id"], info.get("directory"))
        return self.session

    async def create(self) -> Created:
        session = await self.new_session()
        return {"node": self.name, "sessionID": session.id, "directory": session.directory}

    async def current_session(self) -> Session:
        """The node's session, created on first use (once, however many calls race for it)."""
        async with self._creating:
            return self.session or await self.new_session()

    async def _replace(self, gone: Session) -> Session:
        """A new session for the node in place of ``gone`` (unless another call replaced it already)."""
        async with self._creating:
            if self.session is None or self.session.id == gone.id:
                await self.new_session()
            assert self.session is not None
            return self.session

    async def _on_session(self, method: str, suffix: str, **kwargs: Any) -> tuple[Session, Any]:
        """``/session/:id<suffix>`` on the node's session; a 404 replaces the session and the
        request is made once more, on the new one."""
        session = await self.current_session()
        try:
            return session, await self._request(method, f"/session/{session.id}{suffix}", **kwargs)
        except SessionGone:
            session = await self._replace(session)
            return session, await self._request(method, f"/session/{session.id}{suffix}", **kwargs)

    def _params(self, session: Session) -> dict[str, str]:
        """The instance (directory) the session lives in, for the per-directory routes."""
        return {"directory": session.directory} if session.directory else {}

    def _following(self, session: Session) -> Following | None:
        """The turn still being followed on ``session``, if any."""
        following = self.following
        if following is None or following.done.is_set() or following.turn.session_id != session.id:
            return None
        return following

    async def _server_state(self, session: Session) -> str:
        """What the server says of the session: ``idle`` (absent from ``/session/status``),
        ``busy`` or ``retry``."""
        statuses = await self._request("GET", "/session/status", params=self._params(session))
        entry = statuses.get(session.id) if isinstance(statuses, dict) else None
        return str(entry.get("type", "busy")) if isinstance(entry, dict) else "idle"

    async def _status_of(self, session: Session) -> Status:
        """``busy`` while the server says so (``detail`` names a state other than busy) or a
        prompt sent here has not finished yet (the server may not have announced it yet)."""
        server = await self._server_state(session)
        busy = server != "idle" or self._following(session) is not None
        status: Status = {"node": self.name, "sessionID": session.id, "status": "busy" if busy else "idle"}
        if server not in ("idle", "busy"):
            status["detail"] = server
        return status

    async def status(self) -> Status:
        session, _ = await self._on_session("GET", "")
        return await self._status_of(session)

    async def messages(self, limit: int) -> Transcript:
        session, messages = await self._on_session("GET", "/message", params={"limit": limit})
        return {"node": self.name, "sessionID": session.id, "messages": [compact_message(m) for m in messages or []]}

    async def interrupt(self) -> Interrupted:
        """Abort the running turn (the session is kept) and wait, bounded, until the server says
        it is idle; the turn followed here is over then, even if its idle event is still on its way."""
        session, _ = await self._on_session("POST", "/abort")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INTERRUPT_SETTLE_SECONDS
        while await self._server_state(session) != "idle" and loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        following = self._following(session)
        if following is not None:
            following.stop()
        return {**await self._status_of(session), "interrupted": True}

    async def reset(self) -> Reset:
        """A new session for the node, refused while the current one is busy."""
        status = await self.status()
        if status["status"] != "idle":
            raise NodeError(
                f"node {self.name}: session {status['sessionID']} is busy; interrupt_session it or wait, then reset"
            )
        previous = status["sessionID"]
        session = await self.new_session()
        return {"node": self.name, "sessionID": session.id, "previousSessionID": previous}

    # -- prompting -------------------------------------------------------------------------------

    async def send(self, text: str, wait_seconds: float) -> Reply:
        """Prompt the node's session and wait up to ``wait_seconds`` for it to be idle: the reply
        (``timedOut`` false), or what the turn has produced so far (``timedOut`` true)."""
        session = await self.current_session()
        following = await self._follow(session)
        body = {"parts": [{"type": "text", "text": text}]}
        try:
            # A prompt sent while the session is busy joins the running turn, whose busy status
            # was announced before the stream was opened: the idle that ends that turn ends this one.
            following.turn.busy_seen = (
                self._following(session) is not None or await self._server_state(session) != "idle"
            )
            if self.following is not None:
                self.following.stop()
            self.following = following  # busy from now on, whatever the event stream says yet
            try:
                await self._request("POST", f"/session/{session.id}/prompt_async", json=body)
            except SessionGone:
                session = await self._replace(session)
                following.turn.session_id, following.turn.busy_seen = session.id, False
                await self._request("POST", f"/session/{session.id}/prompt_async", json=body)
        except BaseException:
            following.stop()
            raise
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(following.done.wait(), wait_seconds)
        if following.failure is not None:
            raise NodeError(
                f"node {self.name}: lost the event stream ({following.failure}); "
                "the turn may still run: see get_session_status"
            )
        timed_out = not following.done.is_set()
        reply = following.turn.reply()
        result: Reply = {
            "node": self.name,
            "sessionID": session.id,
            "timedOut": timed_out,
            "text": reply["text"],
            "tools": reply["tools"],
        }
        if "error" in reply:
            result["error"] = reply["error"]
        if "waitingFor" in reply:
            result["waitingFor"] = reply["waitingFor"]
        if timed_out:
            running = [tool["tool"] for tool in result["tools"] if tool["status"] in ("pending", "running")]
            doing = f"running {', '.join(running)}" if running else "still working"
            if "waitingFor" in result:  # nobody here can answer: the server's own clients can
                doing = f"waiting for {', '.join(result['waitingFor'])} to be answered on the server"
            result["note"] = (
                f"no reply within {wait_seconds:g} s, {doing}: the turn goes on; use get_session_status, "
                "get_session_messages or interrupt_session"
            )
        return result

    async def _follow(self, session: Session) -> Following:
        """Open the session directory's event stream and follow a turn on it in a task; returns
        once the stream is open (its first frame read), so no event of the prompt is missed."""
        following = Following(Turn(session.id))
        following.task = asyncio.create_task(self._read_events(following, session), name=f"fleet-{self.name}")
        subscribed = asyncio.create_task(following.subscribed.wait())
        await asyncio.wait({subscribed, following.task}, timeout=SUBSCRIBE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        subscribed.cancel()
        if not following.subscribed.is_set() or following.failure is not None:
            following.stop()
            reason = following.failure or f"no answer within {SUBSCRIBE_SECONDS:g} s"
            raise NodeError(f"node {self.name}: cannot follow {self.url}/event: {reason}")
        return following

    async def _read_events(self, following: Following, session: Session) -> None:
        try:
            async with aconnect_sse(
                self.http, "GET", "/event", params=self._params(session), timeout=httpx.Timeout(10.0, read=None)
            ) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise NodeError(error_message(source.response))
                async for frame in source.aiter_sse():
                    if not frame.data:
                        continue
                    if not following.subscribed.is_set():  # server.connected: the stream is live
                        following.subscribed.set()
                        continue
                    if following.turn.take(json.loads(frame.data)):
                        return
                following.failure = "the server closed it"
        except (httpx.HTTPError, NodeError, ValueError) as exc:
            following.failure = str(exc) or type(exc).__name__
        finally:
            following.done.set()
