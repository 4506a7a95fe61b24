"""What the model sees: the session's history turned into chat messages.

User messages whose input is still queued are left out (they have not been asked yet), and
empty assistant messages (aborted before any text) are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from app.jsonutil import dumps
from app.providers.base import ModelInfo
from app.runtime.history._attachments import tool_content, user_content
from app.wire import MessageWithParts

BASE_SYSTEM_PROMPT = (
    "You are opensession, a coding agent working in the user's project directory. Answer concisely and accurately."
)


def _text(parts: Sequence[Mapping[str, Any]]) -> str:
    return "".join(p.get("text", "") for p in parts if p.get("type") == "text" and not p.get("ignored"))


def tool_result(part: Mapping[str, Any]) -> str:
    """What the model is told a tool call produced (an unfinished call counts as aborted)."""
    state = part["state"]
    if state["status"] == "completed":
        return str(state.get("output", ""))
    if state["status"] == "error":
        return f"Error: {state.get('error', 'tool failed')}"
    return "Error: Tool execution aborted"


def _tool_message(part: Mapping[str, Any], model: ModelInfo) -> dict[str, Any]:
    state = part["state"]
    attachments = (state.get("attachments") or []) if state["status"] == "completed" else []
    return {
        "role": "tool",
        "tool_call_id": part["callID"],
        "content": tool_content(tool_result(part), attachments, model),
    }


def chat_messages(
    history: list[MessageWithParts], queued_user_ids: AbstractSet[str], model: ModelInfo, directory: str
) -> list[dict[str, Any]]:
    """OpenAI chat messages: tool calls become an assistant ``tool_calls`` entry followed by one
    ``tool`` message per call, with its result. Files (the user's, and tools' attachments) become
    content parts for ``model``, project files read from ``directory`` (blocking: run it in a
    thread)."""
    result: list[dict[str, Any]] = []
    for message in history:
        info = message["info"]
        if info["role"] == "user" and info["id"] in queued_user_ids:
            continue
        if info["role"] == "user":
            result.append({"role": "user", "content": user_content(message["parts"], directory, model)})
            continue
        text = _text(message["parts"])
        calls = [p for p in message["parts"] if p["type"] == "tool"]
        if not calls:
            if text:
                result.append({"role": "assistant", "content": text})
            continue
        result.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {
                        "id": p["callID"],
                        "type": "function",
                        "function": {"name": p["tool"], "arguments": dumps(p["state"].get("input") or {})},
                    }
                    for p in calls
                ],
            }
        )
        result += [_tool_message(p, model) for p in calls]
    return result


async def model_messages(
    history: list[MessageWithParts], queued_user_ids: AbstractSet[str], model: ModelInfo, directory: str
) -> list[dict[str, Any]]:
    """``chat_messages``, in a worker thread only when the history mentions project files (reading
    them blocks); a text-only history is translated at once, without a thread hand-off per step."""
    reads = any(
        p.get("type") == "file" and str(p.get("url") or "").startswith("file:")
        for message in history
        for p in message["parts"]
    )
    if reads:
        return await asyncio.to_thread(chat_messages, history, queued_user_ids, model, directory)
    return chat_messages(history, queued_user_ids, model, directory)


def system_prompts(
    directory: str, extra: str | None, summary: str | None = None, agent_prompt: str | None = None
) -> list[str]:
    """System text: ours (or the agent's own prompt), the prompt's, and the summary of compacted
    history if any."""
    prompts = [f"{agent_prompt or BASE_SYSTEM_PROMPT}\nWorking directory: {directory}"]
    if extra:
        prompts.append(extra)
    if summary:
        prompts.append(f"Summary of the earlier conversation (older messages are not repeated):\n{summary}")
    return prompts
