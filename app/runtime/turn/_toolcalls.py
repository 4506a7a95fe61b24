"""Runs the tool calls of one step: parse the arguments, check the doom loop, ask permission,
run the tool with its context, and record the part's lifecycle. A tool failure is reported to
the model (an ``error`` part), never raised; only an abort propagates."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.jsonutil import dumps, loads
from app.observability import metrics, tracing
from app.providers.base import ToolCall
from app.runtime.abort import Aborted, AbortSignal
from app.runtime.agents import Denied, Permissions, QuestionRejected, Questions, Rejected
from app.runtime.extensions import Extensions
from app.runtime.tools import TOOLS, ToolContext, ToolError, ToolServices, repair
from app.runtime.turn._recorder import AssistantRecorder
from app.wire import Session

log = logging.getLogger("opensession.tools")

DOOM_LOOP_REPEATS = 3


@dataclass
class TurnTools:
    """What a turn's steps share about tool use: the calls made so far (for the doom loop)."""

    calls: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class StepOutcome:
    called: bool = False  # the model asked for tools: the turn continues
    blocked: bool = False  # a denial or a plain rejection: the turn stops here


class ToolCalls:
    def __init__(
        self, permissions: Permissions, questions: Questions, services: ToolServices, extensions: Extensions
    ) -> None:
        self.permissions = permissions
        self.questions = questions
        self.services = services
        self.extensions = extensions  # MCP tools, found by name after the built-in ones

    async def run(
        self,
        session: Session,
        recorder: AssistantRecorder,
        calls: list[ToolCall],
        parts: dict[str, dict[str, Any]],
        turn: TurnTools,
        signal: AbortSignal,
    ) -> StepOutcome:
        outcome = StepOutcome(called=bool(calls))
        for call in calls:
            part = parts.get(call.call_id) or await recorder.tool_pending(call.call_id, call.name)
            try:
                with tracing.span("tool.call", tool=call.name):
                    status = await self._one(session, recorder, call, part, turn, signal)
            except Aborted:
                metrics.RECORDER.tool_call(part.get("tool") or call.name, "aborted")
                raise
            metrics.RECORDER.tool_call(part.get("tool") or call.name, status)
            if status == "blocked":
                outcome.blocked = True
        return outcome

    async def _one(
        self,
        session: Session,
        recorder: AssistantRecorder,
        call: ToolCall,
        part: dict[str, Any],
        turn: TurnTools,
        signal: AbortSignal,
    ) -> str:
        name, args = call.name, None
        try:
            parsed = loads(call.arguments or "{}")
            if not isinstance(parsed, dict):
                raise ValueError("arguments must be a JSON object")
            args = parsed
        except ValueError as exc:
            name, args = repair(call.name, f"Invalid input for tool {call.name}: {exc}")
        mcp_tool = None if name in TOOLS else self.extensions.tool(session["directory"], name)
        if name not in TOOLS and mcp_tool is None:  # OpenCode's ``invalid`` tool answers it
            name, rewritten = repair(name, None)
            args = rewritten or args
        part["tool"] = name
        await recorder.tool_running(part, args or {}, call.arguments)
        tool = mcp_tool or TOOLS[name]
        tool_ref = {"messageID": recorder.info["id"], "callID": call.call_id}

        async def ask(permission: str, patterns: list[str], always: list[str], metadata: dict[str, Any]) -> None:
            await self.permissions.ask(
                session,
                permission,
                patterns,
                always=always,
                metadata=metadata,
                tool=tool_ref,
                signal=signal,
                agent=recorder.info["agent"],
            )

        async def progress(metadata: dict[str, Any]) -> None:
            await recorder.tool_progress(part, metadata)

        async def ask_questions(questions: list[dict[str, Any]]) -> list[list[str]]:
            return await self.questions.ask(session, questions, tool=tool_ref, signal=signal)

        ctx = ToolContext(
            session,
            recorder.info["id"],
            call.call_id,
            signal,
            ask,
            progress,
            self.services,
            ask_questions,
            provider_id=recorder.info.get("providerID", ""),
            model_id=recorder.info.get("modelID", ""),
        )
        try:
            signature = (name, dumps(args))
            turn.calls.append(signature)
            if turn.calls[-DOOM_LOOP_REPEATS:] == [signature] * DOOM_LOOP_REPEATS:
                await ask("doom_loop", [name], [name], {"tool": name, "input": args})
            result = await tool.run(ctx, args or {})
        except Aborted:
            await recorder.tool_failed(part, "Tool execution aborted", {"interrupted": True})
            raise
        except ToolError as exc:
            await recorder.tool_failed(part, str(exc))
            return "failed"
        except (Denied, QuestionRejected) as exc:
            await recorder.tool_failed(part, str(exc))
            return "blocked"
        except Rejected as exc:
            await recorder.tool_failed(part, str(exc))
            return "failed" if exc.feedback else "blocked"
        except Exception as exc:  # a tool bug must not take the session down
            log.exception("tool %s failed", name)
            await recorder.tool_failed(part, f"{name} failed: {exc}")
            return "failed"
        await recorder.tool_completed(part, result.output, result.title, result.metadata, result.attachments)
        return "ok"
