"""``opensession run "prompt"``: send one prompt and stream the turn to the terminal, as ``opencode
run`` does: the reply text on standard output as it arrives, tool calls and their results and
errors on standard error. With ``--format json`` every event of the session is one JSON line on
standard output (for scripts).

The event stream is opened before the prompt is sent (``prompt_async``) and read until the
session is idle again. A permission the turn asks for is asked on the terminal when standard input
is one; otherwise it is rejected (the run fails, saying so) unless ``--yes`` approves it once. The
exit status is 1 when the turn ends in an error."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from app.cli.client import Api, add_attach, connect, target_directory
from app.cli.common import NON_INTERACTIVE_RULES, CliError, error_text, event_session

PERMISSION_EVENTS = ("permission.asked", "permission.updated")
REPLIES = {"o": "once", "a": "always", "r": "reject", "": "reject"}
OUTPUT_LINES = 8  # lines of a tool's output shown under it


def register(commands: Any) -> None:
    run = commands.add_parser("run", help="send a prompt and stream the reply")
    run.add_argument("message", nargs="+", help="the prompt")
    which = run.add_mutually_exclusive_group()
    which.add_argument("--session", "-s", metavar="ID", help="continue this session")
    which.add_argument(
        "--continue", "-c", dest="continue_", action="store_true", help="continue the directory's last session"
    )
    run.add_argument("--model", "-m", metavar="PROVIDER/MODEL", help="model to use")
    run.add_argument("--agent", help="agent to use")
    run.add_argument("--format", choices=["default", "json"], default="default", help="json: one event per line")
    run.add_argument("--yes", "-y", action="store_true", help="approve permission requests (once each)")
    run.add_argument("--directory", help="project directory (default: the server's; here, the current one)")
    add_attach(run)
    run.set_defaults(handler=main)


def _model(value: str | None) -> dict[str, str] | None:
    if value is None:
        return None
    provider, _, model = value.partition("/")
    if not provider or not model:
        raise CliError(f"--model takes provider/model, got {value!r}")
    return {"providerID": provider, "modelID": model}


def _session(api: Api, args: argparse.Namespace) -> dict[str, Any]:
    """The session to prompt: ``--session``, the directory's latest (``--continue``) or a new one."""
    directory = target_directory(args)
    if args.session:
        info: dict[str, Any] = api.call("GET", f"/session/{args.session}")
        return info
    if args.continue_:
        latest = api.call("GET", "/session", directory=directory, params={"roots": "true", "limit": 1})
        if not latest:
            raise CliError(f"no session to continue in {directory or 'the server directory'}")
        return dict(latest[0])
    created: dict[str, Any] = api.call(
        "POST", "/session", directory=directory, json={"permission": NON_INTERACTIVE_RULES}
    )
    return created


def _agent(api: Api, name: str | None, directory: str) -> str | None:
    """``--agent`` when the server has it as a primary agent; otherwise, as OpenCode does, a
    warning and the default agent."""
    if name is None:
        return None
    found = [agent for agent in api.call("GET", "/agent", directory=directory) if agent.get("name") == name]
    if not found:
        print(f'! agent "{name}" not found: using the default agent', file=sys.stderr)
        return None
    if found[0].get("mode") == "subagent":
        print(f'! agent "{name}" is a subagent, not a primary agent: using the default agent', file=sys.stderr)
        return None
    return name


class Turn:
    """Follows one turn's events and renders them; remembers whether it failed."""

    def __init__(self, api: Api, session: dict[str, Any], *, as_json: bool, approve: bool, ask: bool) -> None:
        self.api = api
        self.session_id: str = session["id"]
        self.directory: str = session["directory"]  # where its permission requests are answered
        self.as_json = as_json
        self.approve = approve
        self.ask = ask
        self.sessions = {self.session_id}  # and its sub-agents' (in its directory), whose asks are ours too
        self.part_types: dict[str, str] = {}
        self.streamed: set[str] = set()
        self.errors: list[str] = []
        self.answered: set[str] = set()  # permission requests (a server may announce one twice)
        self.busy = False
        self.header_shown = False

    def _note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def _fail(self, text: str) -> None:
        if text not in self.errors:
            self.errors.append(text)
            self._note(f"error: {text}")

    def handle(self, event: dict[str, Any]) -> bool:
        """Take one event; True once the turn is over."""
        kind, props = event.get("type", ""), event.get("properties") or {}
        info: dict[str, Any] = props["info"] if isinstance(props.get("info"), dict) else {}
        if kind == "session.created" and info.get("parentID") in self.sessions:
            self.sessions.add(info["id"])
        owner = event_session(props)
        if owner not in self.sessions:
            return False
        if self.as_json:
            print(json.dumps(event, ensure_ascii=False), flush=True)
        if kind in PERMISSION_EVENTS:
            self._permission(props)
        if owner != self.session_id:
            return False
        if kind == "session.status":  # the turn ends at the session.idle that follows "idle"
            self.busy = self.busy or props.get("status", {}).get("type") in ("busy", "retry")
        elif kind == "session.error" and isinstance(props.get("error"), dict):
            self._fail(error_text(props["error"]))
        elif kind == "message.updated" and info.get("role") == "assistant":
            self._assistant(info)
        elif kind == "message.part.updated":
            self._part(props["part"])
        elif kind == "message.part.delta" and self.part_types.get(props.get("partID", "")) == "text":
            self.streamed.add(props["partID"])
            if not self.as_json:
                sys.stdout.write(props.get("delta", ""))
                sys.stdout.flush()
        return kind == "session.idle" and self.busy

    def _assistant(self, info: dict[str, Any]) -> None:
        if isinstance(info.get("error"), dict) and info["error"].get("name") != "MessageAbortedError":
            self._fail(error_text(info["error"]))
        if not self.header_shown and not self.as_json:
            self.header_shown = True
            self._note(f"> {info.get('agent', '?')} · {info.get('providerID', '?')}/{info.get('modelID', '?')}")

    def _part(self, part: dict[str, Any]) -> None:
        self.part_types[part["id"]] = part["type"]
        if self.as_json:
            return
        if part["type"] == "text" and part.get("time", {}).get("end"):
            if part["id"] not in self.streamed:
                sys.stdout.write(part.get("text", ""))
            sys.stdout.write("\n")
            sys.stdout.flush()
        elif part["type"] == "tool":
            self._tool(part)

    def _tool(self, part: dict[str, Any]) -> None:
        state = part.get("state", {})
        status, name = state.get("status"), part.get("tool", "?")
        title = state.get("title") or json.dumps(state.get("input", {}), ensure_ascii=False)[:120]
        if status == "completed":
            self._note(f"⚙ {name} {title}")
            lines = str(state.get("output", "")).strip().splitlines()
            for line in lines[:OUTPUT_LINES]:
                self._note(f"  {line}")
            if len(lines) > OUTPUT_LINES:
                self._note(f"  … ({len(lines) - OUTPUT_LINES} more lines)")
        elif status == "error":
            self._note(f"✗ {name} failed: {state.get('error', '')}")

    def _permission(self, request: dict[str, Any]) -> None:
        if request.get("id") in self.answered:
            return
        self.answered.add(request["id"])
        patterns = request.get("patterns") or request.get("pattern") or []  # the older event names one
        patterns = [patterns] if isinstance(patterns, str) else patterns
        what = f"{request.get('permission') or request.get('type', '?')} ({', '.join(patterns)})"
        if self.approve:
            reply = "once"
            self._note(f"! permission {what}: approved once (--yes)")
        elif self.ask:
            print(f"! permission {what}: allow [o]nce, [a]lways or [r]eject? ", end="", file=sys.stderr, flush=True)
            reply = REPLIES.get(sys.stdin.readline().strip().lower()[:1], "reject")
        else:
            reply = "reject"
            self._fail(f"permission {what} rejected: standard input is not a terminal (pass --yes to approve)")
        self.api.call("POST", f"/permission/{request['id']}/reply", directory=self.directory, json={"reply": reply})


def main(args: argparse.Namespace) -> int:
    # Ctrl-C aborts the turn even when the parent started us with SIGINT ignored (a shell's
    # background job, some supervisors): Python keeps an inherited SIG_IGN otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    text = " ".join(args.message)
    if not text.strip():
        raise CliError("the prompt is empty")
    body: dict[str, Any] = {"parts": [{"type": "text", "text": text}]}
    model = _model(args.model)
    if model:
        body["model"] = model
    if args.directory and not args.attach and not os.path.isdir(args.directory):
        raise CliError(f"no such directory: {args.directory}")
    with connect(args) as api:
        session = _session(api, args)
        agent = _agent(api, args.agent, session["directory"])
        if agent:
            body["agent"] = agent
        turn = Turn(api, session, as_json=args.format == "json", approve=args.yes, ask=sys.stdin.isatty())
        try:
            with api.events(session["directory"]) as events:
                api.call("POST", f"/session/{session['id']}/prompt_async", json=body)
                for event in events:
                    if turn.handle(event):
                        break
                else:
                    raise CliError("the server closed the event stream before the turn ended")
        except KeyboardInterrupt:
            api.call("POST", f"/session/{session['id']}/abort")
            print("aborted", file=sys.stderr)
            return 130
    return 1 if turn.errors else 0
