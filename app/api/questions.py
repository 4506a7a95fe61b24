"""Question routes of both protocols: list the questions waiting for the user, answer one
(``answers``: one list of selected labels per question) or dismiss it. All reach the same
runtime operation; an unknown or settled id is a 404 QuestionNotFoundError, and so is one asked
in another directory than the request's (routes naming no session are scoped to it, as
OpenCode's instance is)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import ID_PATTERN, DirectoryDep, LocationDep, QuestionsDep, RuntimeDep, SessionIDPath, SessionsDep
from app.api.responses import JSONBody

router = APIRouter(tags=["question"])

RequestIDPath = Annotated[str, Path(pattern=ID_PATTERN.format(prefix="que"), description="Question request ID")]


class ReplyBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    answers: list[list[str]] = Field(
        description="User answers in order of questions (each answer is an array of selected labels)"
    )


@router.get("/question", operation_id="question.list", summary="List pending questions")
async def pending(questions: QuestionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(questions.pending(directory=directory))


@router.post("/question/{requestID}/reply", operation_id="question.reply", summary="Reply to question request")
async def reply(runtime: RuntimeDep, directory: DirectoryDep, requestID: RequestIDPath, body: ReplyBody) -> Response:
    await runtime.reply_question(requestID, body.answers, directory=directory)
    return JSONBody(True)


@router.post("/question/{requestID}/reject", operation_id="question.reject", summary="Reject question request")
async def reject(runtime: RuntimeDep, directory: DirectoryDep, requestID: RequestIDPath) -> Response:
    await runtime.reply_question(requestID, None, directory=directory)
    return JSONBody(True)


@router.get("/api/question/request", operation_id="v2.question.request.list", tags=["session questions"])
async def v2_pending(questions: QuestionsDep, directory: LocationDep) -> Response:
    return JSONBody({"location": {"directory": directory}, "data": questions.pending(directory=directory)})


@router.get("/api/session/{sessionID}/question", operation_id="v2.session.question.list", tags=["session questions"])
async def v2_session_pending(sessions: SessionsDep, questions: QuestionsDep, sessionID: SessionIDPath) -> Response:
    await sessions.get(sessionID)
    return JSONBody({"data": questions.pending(sessionID)})


@router.post(
    "/api/session/{sessionID}/question/{requestID}/reply",
    operation_id="v2.session.question.reply",
    status_code=204,
    tags=["session questions"],
)
async def v2_reply(
    runtime: RuntimeDep, sessions: SessionsDep, sessionID: SessionIDPath, requestID: RequestIDPath, body: ReplyBody
) -> Response:
    await sessions.get(sessionID)
    await runtime.reply_question(requestID, body.answers, session_id=sessionID)
    return Response(status_code=204)


@router.post(
    "/api/session/{sessionID}/question/{requestID}/reject",
    operation_id="v2.session.question.reject",
    status_code=204,
    tags=["session questions"],
)
async def v2_reject(
    runtime: RuntimeDep, sessions: SessionsDep, sessionID: SessionIDPath, requestID: RequestIDPath
) -> Response:
    await sessions.get(sessionID)
    await runtime.reply_question(requestID, None, session_id=sessionID)
    return Response(status_code=204)
