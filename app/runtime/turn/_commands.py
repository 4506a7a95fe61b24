"""User-run operations that are not prompts to the model: ``shell`` (a command the user runs,
recorded as a user message plus an assistant message holding a completed ``bash`` part) and
project ``command`` templates from opencode.json and MCP servers' prompts (expanded into a prompt)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Protocol, cast

from app import ids
from app.clock import now_ms
from app.config import ConfigLoader
from app.events.model import Event
from app.jsonutil import dumps
from app.providers.registry import ModelRef
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.errors import CommandNotFound, InvalidInput
from app.runtime.extensions import Extensions
from app.runtime.history import HistoryDomain, MessageWithParts, commit_staged
from app.runtime.infrastructure import Infrastructure
from app.runtime.inputs import DEFAULT_AGENT, InputsDomain, PromptRequest
from app.runtime.sessions import SessionsDomain, zero_tokens
from app.runtime.tools import Bash, ToolContext, ToolError, ToolServices
from app.runtime.turn._recorder import ABORTED, AssistantRecorder
from app.store import request_keys
from app.wire import AssistantMessage, Part, Session, UserMessage

SHELL_NOTICE = "The following tool was executed by the user"
# A shell command sent again with its Idempotency-Key waits this long for the first run's reply
# to end (it may still run on another process), looking every REPEAT_POLL_S.
REPEAT_WAIT_S = 600.0
REPEAT_POLL_S = 0.1


# Built in, as in OpenCode: ``/init`` (and ``POST /session/:id/init``) has the model write AGENTS.md.
INIT_TEMPLATE = """Write (or improve) the `AGENTS.md` file at the root of this project: short, concrete \
guidance for coding agents that will work here later. Keep only what an agent would otherwise \
get wrong or waste time discovering.

Focus requested by the user, if any:
$ARGUMENTS

Find out first, preferring files that run over files that describe:
- the README, the package manifests and lock files, the build, test, lint and format settings;
- CI workflows and task runners;
- instructions already written for agents (`AGENTS.md`, `CLAUDE.md`, `.cursorrules`,
  `.github/copilot-instructions.md`) and the project's `opencode.json`.

Then write down:
- the exact commands to build, test (including a single test), lint and format;
- how the code is laid out and where its entry points are;
- conventions that differ from the usual ones for this language or framework;
- traps: required environment, generated files not to edit, slow or flaky steps.

If `AGENTS.md` exists, update it in place and keep what is still true. No generic advice."""
BUILT_IN_COMMANDS = [
    {
        "name": "init",
        "description": "guided AGENTS.md setup",
        "source": "command",
        "template": INIT_TEMPLATE,
        "hints": ["$ARGUMENTS"],
    }
]


def _shell_request(command: str, agent: str, ref: ModelRef) -> str:
    """What a shell command request asks, as its Idempotency-Key records it."""
    return f"shell {dumps([command, agent, ref.provider_id, ref.model_id])}"


def command_list(config: ConfigLoader, directory: str) -> list[dict[str, Any]]:
    """The built-in commands, then the project's (``command.<name>`` in opencode.json; a project
    command replaces a built-in of the same name), as ``GET /command`` lists them."""
    project = [
        {"name": name, **{k: spec[k] for k in ("description", "template", "agent", "model", "subtask") if k in spec}}
        for name, spec in config.load(directory).commands.items()
        if isinstance(spec.get("template"), str)
    ]
    names = {c["name"] for c in project}
    return [c for c in BUILT_IN_COMMANDS if c["name"] not in names] + project


def expand(template: str, arguments: str) -> str:
    """``$ARGUMENTS`` is the whole argument string; ``$1``, ``$2``... its words."""
    words = arguments.split()
    text = re.sub(
        r"\$(\d+)", lambda m: words[int(m.group(1)) - 1] if 0 < int(m.group(1)) <= len(words) else "", template
    )
    return text.replace("$ARGUMENTS", arguments)


class Prompter(Protocol):
    """Admits a prompt and waits for its answer (the Runtime's ``prompt_and_wait``)."""

    async def prompt_and_wait(self, session_id: str, request: PromptRequest) -> MessageWithParts: ...


@dataclass
class Commands:
    infra: Infrastructure
    sessions: SessionsDomain
    inputs: InputsDomain
    history: HistoryDomain
    tools: ToolServices
    prompter: Prompter
    extensions: Extensions

    async def all(self, directory: str) -> list[dict[str, Any]]:
        """``GET /command``: the built-in and project commands, then the MCP servers' prompts."""
        return command_list(self.infra.config, directory) + await self.extensions.commands(directory)

    async def prompt_for(
        self,
        session: Session,
        name: str,
        arguments: str,
        *,
        agent: str | None,
        model: str | None,
        message_id: str | None,
        variant: str | None = None,
        request_key: str | None = None,
    ) -> PromptRequest:
        spec = next((c for c in await self.all(session["directory"]) if c["name"] == name), None)
        if spec is None:
            raise CommandNotFound(name)
        chosen = model or spec.get("model")
        ref = None
        if chosen:
            if "/" not in chosen:
                raise InvalidInput(f"model must look like provider/model, got {chosen!r}")
            ref = ModelRef(*chosen.split("/", 1))
        return PromptRequest(
            parts=[{"type": "text", "text": expand(spec["template"], arguments)}],
            agent=agent or spec.get("agent"),
            model=ref,
            message_id=message_id,
            variant=variant,
            request_key=request_key,
        )

    async def command(
        self,
        session_id: str,
        name: str,
        arguments: str,
        *,
        agent: str | None = None,
        model: str | None = None,
        message_id: str | None = None,
        variant: str | None = None,
        request_key: str | None = None,
    ) -> MessageWithParts:
        session = await self.sessions.service.get(session_id)
        request = await self.prompt_for(
            session,
            name,
            arguments,
            agent=agent,
            model=model,
            message_id=message_id,
            variant=variant,
            request_key=request_key,
        )
        reply = await self.prompter.prompt_and_wait(session_id, request)
        props = {"name": name, "sessionID": session_id, "arguments": arguments, "messageID": reply["info"]["id"]}
        self.infra.log.publish(Event("command.executed", props, session_id, session["directory"]))
        return reply

    async def shell(
        self, session_id: str, command: str, *, agent: str, model: ModelRef | None, request_key: str | None = None
    ) -> MessageWithParts:
        """Run ``command`` now (409 if the session is busy) and record it in the history. With
        ``request_key``, a copy of a request that already ran answers that run's reply once it
        has ended (closed by the session's next owner if its process died) and runs nothing."""
        session = await self.sessions.service.get(session_id)
        ref = self.inputs.admission.model_for(session, model)
        if request_key is not None:
            earlier = await request_keys.find(self.infra.db, request_key)
            asked = (session_id, _shell_request(command, agent, ref))
            if earlier and earlier.message_id is not None and (earlier.session_id, earlier.request) == asked:
                return await self._ended_reply(session_id, earlier.message_id)

        async def work(signal: AbortSignal) -> MessageWithParts:
            return await self._shell(session, command, agent, ref, signal, request_key)

        return await self.sessions.coordinator.run_exclusive(session_id, work)

    async def _ended_reply(self, session_id: str, reply_id: str) -> MessageWithParts:
        """Reply ``reply_id`` once it has ended, or as it stands after ``REPEAT_WAIT_S``."""
        waited_until = asyncio.get_running_loop().time() + REPEAT_WAIT_S
        while True:
            reply = await self.history.service.get_message(session_id, reply_id)
            if "completed" in reply["info"]["time"] or asyncio.get_running_loop().time() > waited_until:
                return reply
            await asyncio.sleep(REPEAT_POLL_S)

    async def _shell(
        self, session: Session, command: str, agent: str, ref: ModelRef, signal: AbortSignal, request_key: str | None
    ) -> MessageWithParts:
        log = self.infra.log
        session_id, directory = session["id"], session["directory"]
        user_id = ids.message_id()
        agent = agent or DEFAULT_AGENT
        model = {"providerID": ref.provider_id, "modelID": ref.model_id}
        question: UserMessage = {
            "id": user_id,
            "sessionID": session_id,
            "role": "user",
            "time": {"created": now_ms()},
            "agent": agent,
            "model": model,
        }
        info: AssistantMessage = {
            "id": ids.message_id(),
            "sessionID": session_id,
            "role": "assistant",
            "time": {"created": now_ms()},
            "parentID": user_id,
            "modelID": ref.model_id,
            "providerID": ref.provider_id,
            "mode": agent,
            "agent": agent,
            "path": {"cwd": directory, "root": directory},
            "cost": 0,
            "tokens": zero_tokens(),
        }
        recorder = AssistantRecorder(log, info, directory, self.infra.settings.part_flush_seconds)
        earlier = None
        async with log.transaction() as tx:
            if request_key is not None:
                made = request_keys.Keyed(session_id, _shell_request(command, agent, ref), info["id"])
                earlier = await self.sessions.service.claim_key(tx, request_key, made)
            if earlier is None:
                # A revert staged before the command is committed first, as a prompt's admission does.
                await commit_staged(tx, self.history.service, await self.sessions.service.current(tx, session_id))
                notice = {"type": "text", "text": SHELL_NOTICE, "synthetic": True}
                await self.history.service.append_message(tx, session, question, [notice])
                await recorder.begin(tx, None)  # a user command is not a model step: no snapshot
        if earlier is not None:
            assert earlier.message_id is not None, "a shell command's key records its reply"
            return await self.history.service.get_message(session_id, earlier.message_id)
        part = await recorder.tool_pending(ids.new_id("part"), "bash")
        args = {"command": command, "description": "user command"}
        await recorder.tool_running(part, args, "")

        async def allowed(*_args: Any) -> None:
            return None  # the user ran it: no permission to ask

        async def progress(metadata: dict[str, Any]) -> None:
            await recorder.tool_progress(part, metadata)

        ctx = ToolContext(session, info["id"], part["callID"], signal, allowed, progress, self.tools)
        error = None
        try:
            result = await Bash().run(ctx, args)
            await recorder.tool_completed(part, result.output, result.title, result.metadata)
        except ToolError as exc:
            await recorder.tool_failed(part, str(exc))
        except Aborted:
            error = ABORTED
        async with log.transaction() as tx:
            await recorder.complete(tx, [], error)
        parts = cast(list[Part], list(recorder.parts))  # the recorder writes the wire's parts
        return {"info": recorder.info, "parts": parts}
