"""Permissions: rules ``{permission, pattern, action: allow|deny|ask}``, evaluated last match wins.

Rule sources, in order (later ones win): the agent's rules (``app.runtime.agents``), the project's
``opencode.json`` ``permission`` key, the session's rules (``POST/PATCH /session``, the deprecated
``tools`` map of a prompt), and the allow rules saved with ``always`` (persisted per project,
unlike OpenCode, and listed by ``GET /api/permission/saved``).

``ask`` publishes ``permission.asked`` and blocks the tool (the session stays busy) until a
reply: ``once`` runs it; ``always`` also saves allow rules and approves the session's other
pending requests that now pass; ``reject`` fails the tool, rejects the session's other pending
requests and stops the loop; ``reject`` with a message fails the tool with that feedback and the
loop goes on. An abort or a restart leaves no request hanging.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from app import ids
from app.clock import now_ms
from app.config import ConfigLoader
from app.events.log import EventLog
from app.events.model import Event
from app.observability import metrics
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.agents._definitions import Agents, Rule, config_rules
from app.runtime.agents._requests import PendingRequests
from app.runtime.errors import PermissionNotFound
from app.runtime.payloads import next_event
from app.runtime.sessions import Memo
from app.store import saved_permissions
from app.store.saved_permissions import SavedPermission
from app.wire import Session

REPLIES = ("once", "always", "reject")
PERMISSION_OF = {"write": "edit", "apply_patch": "edit"}  # tools checked under another tool's permission


class Denied(Exception):
    """A rule forbids this call; the message is what the model is told."""

    def __init__(self) -> None:
        super().__init__(
            "The user has specified a rule which prevents you from using this specific tool call. "
            "You may try using a different tool, or ask the user for help."
        )


class Rejected(Exception):
    """The user said no. ``feedback`` is set when they said why (then the loop continues)."""

    def __init__(self, feedback: str | None = None) -> None:
        message = "The user rejected permission to use this specific tool call."
        if feedback:
            message = (
                f"The user rejected permission to use this specific tool call with the following feedback: {feedback}"
            )
        super().__init__(message)
        self.feedback = feedback


RuleKey = tuple[tuple[str, str, str], ...]


def _rule_key(rules: list[Rule]) -> RuleKey:
    """``rules`` as a hashable value: the key under which their verdicts are remembered."""
    return tuple((rule["permission"], rule["pattern"], rule["action"]) for rule in rules)


@lru_cache(maxsize=4096)
def _verdict(permission: str, pattern: str, rules: RuleKey) -> str:
    """Why remembered: every step asks the same rules about every tool it may offer (two glob
    matches per rule and tool), and the rules rarely change between steps."""
    action = "ask"
    for rule_permission, rule_pattern, rule_action in rules:
        if fnmatchcase(permission, rule_permission) and fnmatchcase(pattern, rule_pattern):
            action = rule_action
    return action


def evaluate(permission: str, pattern: str, rules: list[Rule]) -> str:
    """The action of the last rule matching both the permission and the pattern (default ask)."""
    return _verdict(permission, pattern, _rule_key(rules))


@dataclass
class Pending:
    info: dict[str, Any]
    directory: str | None
    project_id: str
    rules: list[Rule]
    reply: asyncio.Future[tuple[str, str | None]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Permissions(PendingRequests[Pending]):
    ASKED = "permission.asked"
    SETTLED = ("permission.replied",)

    def __init__(
        self,
        log: EventLog,
        config: ConfigLoader,
        agents: Agents,
        saved: Memo[str, list[Rule]],
        changed: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__()
        self.log = log
        self.config = config
        self.agents = agents
        # Saved rules per project (every step reads them), kept; a change here empties it once
        # committed and ``changed`` tells the other processes to empty theirs.
        self._saved = saved
        self._changed = changed

    def not_found(self, request_id: str) -> Exception:
        return PermissionNotFound(request_id)

    async def rules_for(self, session: Session, agent: str | None = None) -> list[Rule]:
        return [
            *self.agents.get(session["directory"], agent).rules,
            *config_rules(self.config.load(session["directory"]).permission),
            *(session.get("permission") or []),
            *await self._saved_rules(session["projectID"]),
        ]

    async def _saved_rules(self, project_id: str) -> list[Rule]:
        """The ``always`` answers saved for the project, as allow rules (shared: not to be changed)."""
        kept = self._saved.get(project_id)
        if kept is not None:
            return kept
        generation = self._saved.generation
        saved = await saved_permissions.of_project(self.log.db, project_id)
        rules: list[Rule] = [{"permission": s.permission, "pattern": s.pattern, "action": "allow"} for s in saved]
        self._saved.put_read(project_id, rules, generation)
        return rules

    @staticmethod
    def disabled_tools(rules: list[Rule], names: list[str]) -> set[str]:
        """Tools ``rules`` (``rules_for``) deny outright: they are not offered to the model at all
        (``write`` and ``edit`` both fall under the ``edit`` permission, as in OpenCode)."""
        key = _rule_key(rules)
        return {name for name in names if _verdict(PERMISSION_OF.get(name, name), "*", key) == "deny"}

    @staticmethod
    def denied(rules: list[Rule], permission: str, patterns: list[str]) -> set[str]:
        """The patterns ``rules`` deny ``permission`` for (skills an agent may not load are not listed)."""
        key = _rule_key(rules)
        return {p for p in patterns if _verdict(permission, p, key) == "deny"}

    async def ask(
        self,
        session: Session,
        permission: str,
        patterns: list[str],
        *,
        always: list[str],
        metadata: dict[str, Any],
        tool: dict[str, str] | None,
        signal: AbortSignal,
        agent: str | None = None,
    ) -> None:
        """Return if the call is allowed; raise Denied or Rejected otherwise (may wait for a reply)."""
        rules = await self.rules_for(session, agent)
        actions = [evaluate(permission, pattern, rules) for pattern in patterns]
        if "deny" in actions:
            raise Denied
        if all(action == "allow" for action in actions):
            return
        info: dict[str, Any] = {
            "id": ids.new_id("permission"),
            "sessionID": session["id"],
            "permission": permission,
            "patterns": patterns,
            "metadata": metadata,
            "always": always,
        }
        if tool:
            info["tool"] = tool
        pending = Pending(info, session["directory"], session["projectID"], rules)
        self._pending[info["id"]] = pending
        self._announce(session["directory"], "permission.asked", info, "permission.v2.asked", _v2_request(info))
        asked = time.perf_counter()
        try:
            reply, message = await signal.race(asyncio.shield(pending.reply))
        except Aborted:
            self._settle(pending, "reject", None, session["directory"])  # no request left hanging
            metrics.RECORDER.permission_wait("aborted", time.perf_counter() - asked)
            raise
        finally:
            self._pending.pop(info["id"], None)
        metrics.RECORDER.permission_wait(reply, time.perf_counter() - asked)
        if reply == "reject":
            raise Rejected(message)

    def _announce(
        self, directory: str | None, legacy: str, props: dict[str, Any], v2: str, v2_props: dict[str, Any]
    ) -> None:
        session_id = props.get("sessionID")
        self.log.publish(Event(legacy, props, session_id, directory))
        self.log.publish(Event(v2, v2_props, session_id, directory))

    def pending_v2(self, session_id: str | None = None, *, directory: str | None = None) -> list[dict[str, Any]]:
        return [_v2_request(info) for info in self.pending(session_id, directory=directory)]

    async def reply(
        self, request_id: str, reply: str, message: str | None = None, *, directory: str | None = None
    ) -> None:
        """Answer a pending request. The answer is taken (settled) before anything is awaited, so
        an abort racing it either came first (the request is gone: PermissionNotFound, nothing
        saved) or comes after (the tool ran with the user's answer and ``always`` is saved)."""
        pending = self._pending.get(request_id)
        if pending is None or pending.reply.done():
            raise PermissionNotFound(request_id)
        session_id = pending.info["sessionID"]
        self._settle(pending, reply, message if reply == "reject" else None, directory)
        if reply == "always":
            await self._save(pending)
        others = [p for p in self._pending.values() if p.info["sessionID"] == session_id and not p.reply.done()]
        if reply == "reject" and not message:
            for other in others:
                self._settle(other, "reject", None, directory)
        elif reply == "always":
            rules = pending.rules + [
                {"permission": pending.info["permission"], "pattern": pattern, "action": "allow"}
                for pattern in pending.info["always"]
            ]
            for other in others:
                if all(evaluate(other.info["permission"], p, rules) == "allow" for p in other.info["patterns"]):
                    self._settle(other, "always", None, directory)

    def _settle(self, pending: Pending, reply: str, message: str | None, directory: str | None) -> None:
        if pending.reply.done():
            return
        pending.reply.set_result((reply, message))
        props = {"sessionID": pending.info["sessionID"], "requestID": pending.info["id"], "reply": reply}
        self._announce(directory, "permission.replied", props, "permission.v2.replied", dict(props))

    async def _save(self, pending: Pending) -> None:
        async with self.log.db.write() as scope:
            scope.when_durable(self._saved.clear)  # once readers see it
            for pattern in pending.info["always"]:
                saved = SavedPermission(
                    ids.new_id("permission"), pending.project_id, pending.info["permission"], pattern, now_ms()
                )
                saved_permissions.save(scope, saved)
        await self._changed()

    async def saved(self) -> list[dict[str, Any]]:
        every = await saved_permissions.every(self.log.db)
        return [{"id": s.id, "projectID": s.project_id, "action": s.permission, "resource": s.pattern} for s in every]

    async def forget(self, saved_id: str) -> None:
        async with self.log.db.write() as scope:
            saved_permissions.forget(scope, saved_id)
            scope.when_durable(self._saved.clear)  # once readers see it
        await self._changed()


def _v2_request(info: dict[str, Any]) -> dict[str, Any]:
    request = next_event(
        info["sessionID"],
        id=info["id"],
        action=info["permission"],
        resources=info["patterns"],
        save=info["always"],
        metadata=info["metadata"],
    )
    request.pop("timestamp")
    if info.get("tool"):
        request["source"] = {"type": "tool", **info["tool"]}
    return request
