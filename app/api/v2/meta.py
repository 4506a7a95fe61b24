"""V2 instance metadata (``/api/agent``, ``/api/command``, ``/api/model``, ``/api/provider``,
``/api/reference``, ``/api/skill``), answered as ``{location, data}`` like every V2 read; the
same agents, commands, providers and skills the legacy routes list, in the V2 shapes."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import errors
from app.api.deps import AgentsDep, CommandsDep, ConfigDep, LocationDep, ProvidersDep, SkillsDep
from app.api.v2 import views
from app.api.v2.pty import located

router = APIRouter(prefix="/api", tags=["v2"])


@router.get("/agent", operation_id="v2.agent.list", summary="List agents")
async def agents(agents: AgentsDep, directory: LocationDep) -> Response:
    return await located(directory, [views.agent(a.as_wire()) for a in agents.all(directory).values()])


@router.get("/command", operation_id="v2.command.list", summary="List commands")
async def commands(commands: CommandsDep, directory: LocationDep) -> Response:
    return await located(directory, [views.command(c) for c in await commands.all(directory)])


@router.get("/model", operation_id="v2.model.list", summary="List models")
async def models(providers: ProvidersDep, directory: LocationDep) -> Response:
    return await located(directory, [m for p in providers.catalog(directory) for m in views.models(p)])


@router.get("/provider", operation_id="v2.provider.list", summary="List providers")
async def providers(providers: ProvidersDep, directory: LocationDep) -> Response:
    return await located(directory, [views.provider(p) for p in providers.catalog(directory)])


@router.get("/provider/{providerID}", operation_id="v2.provider.get", summary="Get provider")
async def provider(providers: ProvidersDep, directory: LocationDep, providerID: str) -> Response:
    entry = next((p for p in providers.catalog(directory) if p["id"] == providerID), None)
    if entry is None:
        return errors.tagged(404, "ProviderNotFoundError", f"Provider not found: {providerID}", providerID=providerID)
    return await located(directory, views.provider(entry))


@router.get("/reference", operation_id="v2.reference.list", summary="List references")
async def references(config: ConfigDep, directory: LocationDep) -> Response:
    return await located(directory, views.references(config.load(directory).references, directory))


@router.get("/skill", operation_id="v2.skill.list", summary="List skills")
async def skills(skills: SkillsDep, directory: LocationDep) -> Response:
    return await located(directory, [skill.as_wire() for skill in skills.all(directory)])
