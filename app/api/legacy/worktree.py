"""Git worktrees (``/experimental/worktree``): parallel agents on one repository, each session
in a worktree of its own. The work is the ``worktrees`` domain's; failures are OpenCode's named
400s (``WorktreeNotGitError``, ``WorktreeRemoveFailedError``, ...)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import DirectoryDep, IdempotencyKeyDep, WorktreesDep, checked_directory
from app.api.legacy.schemas import WorktreeCreateInput, WorktreeRemoveInput, WorktreeResetInput
from app.api.responses import JSONBody

router = APIRouter(tags=["worktree"])

_FAILURES: dict[int | str, dict[str, str]] = {400: {"description": "WorktreeError or BadRequest"}}


@router.get("/experimental/worktree", operation_id="worktree.list", summary="List worktrees", responses=_FAILURES)
async def list_worktrees(worktrees: WorktreesDep, directory: DirectoryDep) -> Response:
    """The project's worktree directories (``[]`` outside a git repository)."""
    return JSONBody(await worktrees.list(directory))


@router.post("/experimental/worktree", operation_id="worktree.create", summary="Create worktree", responses=_FAILURES)
async def create_worktree(
    worktrees: WorktreesDep, directory: DirectoryDep, key: IdempotencyKeyDep, body: WorktreeCreateInput | None = None
) -> Response:
    """A worktree on a new branch ``opencode/<name>``, answered at once; ``worktree.ready`` (or
    ``worktree.failed``) on ``/global/event`` once it is filled, then the start commands run."""
    found = body or WorktreeCreateInput()
    return JSONBody(await worktrees.create(directory, found.name, found.startCommand, request_key=key))


@router.post(
    "/experimental/worktree/reset", operation_id="worktree.reset", summary="Reset worktree", responses=_FAILURES
)
async def reset_worktree(worktrees: WorktreesDep, directory: DirectoryDep, body: WorktreeResetInput) -> Response:
    """Reset a worktree of the project to the default branch, dropping its local changes."""
    return JSONBody(await worktrees.reset(directory, checked_directory(body.directory)))


@router.delete("/experimental/worktree", operation_id="worktree.remove", summary="Remove worktree", responses=_FAILURES)
async def remove_worktree(worktrees: WorktreesDep, directory: DirectoryDep, body: WorktreeRemoveInput) -> Response:
    """Remove a worktree of the project and its branch; any other directory is refused, untouched."""
    return JSONBody(await worktrees.remove(directory, checked_directory(body.directory)))
