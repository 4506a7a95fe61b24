"""Instance metadata routes the OpenCode TUI and SDK read at start-up (health, paths, config,
providers, agents, project) and the empty lists of features not hosted here yet. Without
``/config``, ``/config/providers``, ``/provider`` and ``/agent`` the TUI refuses to start."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response

from app import __version__
from app.api import stainless
from app.api.deps import (
    AgentsDep,
    CommandsDep,
    ConfigDep,
    DirectoryDep,
    FormattersDep,
    LanguageServersDep,
    ProvidersDep,
    RuntimeDep,
    SessionsDep,
    SettingsDep,
    SkillsDep,
    ToolSettingsDep,
)
from app.api.responses import JSONBody
from app.config import CONFIG_SCHEMA, user_config_directory
from app.providers.registry import ProviderRegistry
from app.runtime.sessions import project_id
from app.runtime.tools import ids, listing

router = APIRouter(tags=["instance"])


# OpenCode's preference when choosing a provider's default model (its ``sort``): the first of
# these found in a model id, else the provider's first model.
_PREFERRED = ("gpt-5", "claude-sonnet-4", "big-pickle", "gemini-3-pro")


def _best(models: dict[str, dict[str, object]]) -> str:
    for wanted in _PREFERRED:
        matches = sorted((m for m in models if wanted in m), reverse=True)
        if matches:
            return matches[0]
    return next(iter(models), "")


def _default_choice(providers: ProviderRegistry, directory: str, listed: list[dict[str, Any]]) -> dict[str, str]:
    ref = providers.default_model(directory)
    defaults = {p["id"]: _best(p["models"]) for p in listed}
    defaults[ref.provider_id] = ref.model_id
    return defaults


@router.get("/global/health", operation_id="global.health")
async def health() -> Response:
    return JSONBody({"healthy": True, "version": __version__})


@router.get("/path", operation_id="path.get")
async def paths(settings: SettingsDep, directory: DirectoryDep) -> Response:
    home = str(Path.home())
    return JSONBody(
        {
            "home": home,
            "state": str(Path(settings.database_url.split("///", 1)[-1]).parent),
            "config": str(user_config_directory(settings.config_dir)),
            "worktree": directory,
            "directory": directory,
        }
    )


@router.get("/config", operation_id="config.get")
async def config(config: ConfigDep, providers: ProvidersDep, directory: DirectoryDep) -> Response:
    raw = dict(config.load(directory).raw)
    raw.setdefault("model", str(providers.default_model(directory)))
    raw.setdefault("share", "disabled")
    return JSONBody(raw)


@router.get("/global/config", operation_id="global.config.get", summary="Get global configuration")
async def global_config(config: ConfigDep) -> Response:
    """The user's configuration alone (their config directory's opencode.json), as OpenCode
    answers it: no project's settings and no defaults filled in but the schema."""
    return JSONBody({"$schema": CONFIG_SCHEMA} | config.user_raw())


@router.get("/config/providers", operation_id="config.providers")
async def config_providers(request: Request, providers: ProvidersDep, directory: DirectoryDep) -> Response:
    listed = providers.catalog(directory)
    default = _default_choice(providers, directory, listed)
    if stainless.speaks(request):
        listed = stainless.providers(listed)
    return JSONBody({"providers": listed, "default": default})


@router.get("/provider", operation_id="provider.list")
async def providers(providers: ProvidersDep, directory: DirectoryDep) -> Response:
    everything, connected = providers.all_providers(directory)
    listed = [p for p in everything if p["id"] in connected]
    return JSONBody(
        {"all": everything, "default": _default_choice(providers, directory, listed), "connected": connected}
    )


@router.get("/agent", operation_id="app.agents")
async def agents(agents: AgentsDep, directory: DirectoryDep) -> Response:
    return JSONBody([agent.as_wire() for agent in agents.all(directory).values()])


# -- 0.x routes the Stainless SDKs still call (opencode-ai on PyPI; see app/api/stainless.py) --


@router.get("/app", operation_id="app.get", include_in_schema=False)
async def app_info(runtime: RuntimeDep, settings: SettingsDep, directory: DirectoryDep) -> Response:
    return JSONBody(
        {
            "hostname": socket.gethostname(),
            "git": await project_id(directory) != "global",
            "path": {
                "config": str(user_config_directory(settings.config_dir)),
                "data": str(settings.data_path),
                "root": directory,
                "cwd": directory,
                "state": str(settings.data_path),
            },
            "time": {"initialized": runtime.started_ms},
        }
    )


@router.post("/app/init", operation_id="app.init", include_in_schema=False)
async def app_init() -> Response:
    """The instance is initialized on first use here; 0.x clients ask for it explicitly."""
    return JSONBody(True)


@router.get("/mode", operation_id="app.modes", include_in_schema=False)
async def modes(agents: AgentsDep, directory: DirectoryDep) -> Response:
    """The primary agents as 0.x modes."""
    primary = [agent for agent in agents.all(directory).values() if agent.mode != "subagent"]
    return JSONBody([stainless.mode(agent.as_wire()) for agent in primary])


@router.get("/project", operation_id="project.list", summary="List all projects")
async def project_list(sessions: SessionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await sessions.projects(directory))


@router.get("/project/current", operation_id="project.current")
async def project_current(sessions: SessionsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await sessions.current_project(directory))


@router.get("/project/{projectID}/directories", operation_id="project.directories")
async def project_directories(projectID: str, directory: DirectoryDep) -> Response:
    return JSONBody([{"directory": directory}])


@router.get("/api/location", operation_id="v2.location.get")
async def location(directory: DirectoryDep) -> Response:
    return JSONBody({"directory": directory, "project": {"id": await project_id(directory), "directory": directory}})


@router.get("/experimental/capabilities", include_in_schema=False)
async def capabilities() -> Response:
    return JSONBody({"backgroundSubagents": False})


@router.get("/experimental/console", include_in_schema=False)
async def console() -> Response:
    return JSONBody({"consoleManagedProviders": [], "switchableOrgCount": 0})


@router.get("/experimental/workspace/adapter", include_in_schema=False)
async def workspace_adapters() -> Response:
    """The kinds of workspace the app offers to create: OpenCode lists its git worktree adapter."""
    return JSONBody([{"type": "worktree", "name": "Worktree", "description": "Create a git worktree"}])


@router.get("/lsp", operation_id="lsp.status", summary="Get LSP status")
async def lsp_status(lsp: LanguageServersDep, directory: DirectoryDep) -> Response:
    """The language servers connected for the directory (none until a tool touches a file)."""
    return JSONBody(lsp.status(directory))


@router.get("/formatter", operation_id="formatter.status", summary="Get formatter status")
async def formatter_status(formatters: FormattersDep, directory: DirectoryDep) -> Response:
    """Every configured formatter and whether it is enabled here (``[]`` with formatters off)."""
    return JSONBody(await formatters.status(directory))


_EMPTY_LISTS = (
    "/experimental/workspace",
    "/experimental/workspace/status",
)


def _empty_list(request: Request) -> Response:
    return JSONBody([])


for _path in _EMPTY_LISTS:
    router.add_api_route(_path, _empty_list, methods=["GET"], include_in_schema=False)


@router.get("/command", operation_id="command.list", summary="The project's commands (opencode.json)")
async def commands(commands: CommandsDep, directory: DirectoryDep) -> Response:
    return JSONBody(await commands.all(directory))


@router.get("/experimental/tool/ids", operation_id="tool.ids", summary="List tool IDs")
async def tool_ids(tool_settings: ToolSettingsDep) -> Response:
    """OpenCode's built-in tool ids for the same switches (``OPENCODE_CLIENT``...): MCP tools are
    not listed, as there."""
    return JSONBody(ids(tool_settings))


@router.get("/experimental/tool", operation_id="tool.list", summary="List tools")
async def tool_list(tool_settings: ToolSettingsDep, provider: str, model: str) -> Response:
    """The tools ``model`` of ``provider`` is offered, with their JSON schemas (the provider
    decides websearch, the model apply_patch or edit/write)."""
    return JSONBody(listing(model, provider, tool_settings))


@router.get("/skill", operation_id="app.skills", summary="List skills")
async def skills(skills: SkillsDep, directory: DirectoryDep) -> Response:
    return JSONBody([skill.as_wire() for skill in skills.all(directory)])


@router.post("/instance/dispose", operation_id="instance.dispose", summary="Dispose instance")
async def instance_dispose(runtime: RuntimeDep, directory: DirectoryDep) -> Response:
    runtime.dispose_instance(directory)
    return JSONBody(True)


@router.post("/global/dispose", operation_id="global.dispose", summary="Dispose all instances")
async def global_dispose(runtime: RuntimeDep) -> Response:
    runtime.dispose_all()
    return JSONBody(True)
