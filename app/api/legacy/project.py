"""Project routes the OpenCode web and desktop app write: ``PATCH /project/:id`` (the icon colour
it gives every project, a name, a start command) and ``POST /project/git/init`` (a folder opened
that is no repository yet). The reads (``/project``, ``/project/current``) are in ``meta``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict

from app.api.deps import DirectoryDep, SessionsDep
from app.api.responses import JSONBody

router = APIRouter(tags=["project"])


class _Lenient(BaseModel):
    """Unknown keys are ignored and ``null`` leaves a value as it is, as OpenCode does."""

    model_config = ConfigDict(extra="ignore")


class ProjectIcon(_Lenient):
    url: str | None = None
    override: str | None = None
    color: str | None = None


class ProjectCommands(_Lenient):
    start: str | None = None


class ProjectUpdate(_Lenient):
    name: str | None = None
    icon: ProjectIcon | None = None
    commands: ProjectCommands | None = None


@router.patch(
    "/project/{projectID}",
    operation_id="project.update",
    summary="Update project",
    responses={404: {"description": "ProjectNotFoundError"}},
)
async def update_project(
    projectID: str, sessions: SessionsDep, directory: DirectoryDep, body: ProjectUpdate
) -> Response:
    """Name, icon and commands of a project this server lists (404 ``ProjectNotFoundError``
    otherwise): kept, shown by ``/project`` and ``/project/current``, and announced as
    ``project.updated``."""
    return JSONBody(await sessions.update_project(projectID, directory, body.model_dump(exclude_none=True)))


@router.post("/project/git/init", operation_id="project.initGit", summary="Initialize git repository")
async def init_git(sessions: SessionsDep, directory: DirectoryDep) -> Response:
    """``git init`` in the instance directory (nothing when it is in a repository already), then
    its project; 400 naming what went wrong (no git, a directory that cannot hold one)."""
    return JSONBody(await sessions.init_git(directory))
