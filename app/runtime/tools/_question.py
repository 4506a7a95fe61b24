"""question: ask the user one or more multiple-choice questions and wait for the answers.

The parameters and the answer's wording are OpenCode's, so a model prompted for OpenCode uses
it unchanged. The round trip (events, listing, replies) belongs to the agents domain, reached
through ``ToolContext.ask_questions``; a dismissal propagates (it stops the turn, as a
permission rejection does).
"""

from __future__ import annotations

from typing import Any

from app.runtime.tools._base import ToolContext, ToolError, ToolResult, schema

DESCRIPTION = """Ask the user one or more questions while you work, and wait for their answers. Use it to:
1. learn the user's preferences or requirements;
2. resolve instructions that can be read more than one way;
3. let the user decide between implementation choices;
4. offer the user directions to take next.

Notes:
- Each question offers options; the user may also type their own answer ("Other").
- Each answer comes back as a list of the chosen labels; `multiple: true` lets the user choose several.
- To recommend an option, list it first and end its label with "(Recommended)".
- Keep `header` very short (at most 12 characters).
"""

_OPTION = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "description": "Display text (1-5 words, concise)"},
        "description": {"type": "string", "description": "Explanation of choice"},
    },
    "required": ["label", "description"],
    "additionalProperties": False,
}
_QUESTION = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "Complete question"},
        "header": {"type": "string", "description": "Very short label (max 30 chars)"},
        "options": {"type": "array", "items": _OPTION, "description": "Available choices"},
        "multiple": {"type": "boolean", "description": "Allow selecting multiple choices"},
    },
    "required": ["question", "header", "options"],
    "additionalProperties": False,
}


def _validated(raw: Any) -> list[dict[str, Any]]:
    """The questions as clients receive them: known keys only, each checked (the model hears why)."""
    if not isinstance(raw, list) or not raw:
        raise ToolError("The questions parameter is required and must be a non-empty list")
    questions = []
    for item in raw:
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("question", "header")):
            raise ToolError("Each question needs question and header strings")
        options = item.get("options")
        if not isinstance(options, list) or not all(
            isinstance(o, dict) and isinstance(o.get("label"), str) and isinstance(o.get("description"), str)
            for o in options
        ):
            raise ToolError("Each question needs options, a list of {label, description} strings")
        if "multiple" in item and not isinstance(item["multiple"], bool):
            raise ToolError("multiple must be a boolean")
        question: dict[str, Any] = {
            "question": item["question"],
            "header": item["header"],
            "options": [{"label": o["label"], "description": o["description"]} for o in options],
        }
        if "multiple" in item:
            question["multiple"] = item["multiple"]
        questions.append(question)
    return questions


def _answer(answer: list[str] | None) -> str:
    return ", ".join(answer) if answer else "Unanswered"


class Question:
    name = "question"
    description = DESCRIPTION
    parameters = schema(
        {"questions": {"type": "array", "items": _QUESTION, "description": "Questions to ask"}}, ["questions"]
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        questions = _validated(args.get("questions"))
        answers = await ctx.ask_questions(questions)
        pairs = ", ".join(
            f'"{q["question"]}"="{_answer(answers[i] if i < len(answers) else None)}"' for i, q in enumerate(questions)
        )
        count = len(questions)
        return ToolResult(
            f"User has answered your questions: {pairs}. You can now continue with the user's answers in mind.",
            title=f"Asked {count} question{'s' if count > 1 else ''}",
            metadata={"answers": answers},
        )
