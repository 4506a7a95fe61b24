"""V2 instance metadata (``/api/agent``, ``/api/command``, ``/api/model``, ``/api/provider``,
``/api/reference``, ``/api/skill``), answered as ``{location, data}`` like every V2 read; the
same agents, commands, providers and skills the legacy routes list, in the V2 shapes."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import errors
from app.api.deps import LocationDep, RuntimeDep
from app.api.v2 import views
from app.api.v2.pty import located

router = APIRouter(prefix="/api", tags=["v2"])


@router.get("/agent", operation_id="v2.agent.list", summary="List agents")
async def agents(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [views.agent(a.as_wire()) for a in runtime.agents.all(directory).values()])


@router.get("/command", operation_id="v2.command.list", summary="List commands")
async def commands(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [views.command(c) for c in await runtime.commands.all(directory)])


@router.get("/model", operation_id="v2.model.list", summary="List models")
async def models(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [m for p in runtime.registry.catalog(directory) for m in views.models(p)])


@router.get("/provider", operation_id="v2.provider.list", summary="List providers")
async def providers(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [views.provider(p) for p in runtime.registry.catalog(directory)])


@router.get("/provider/{providerID}", operation_id="v2.provider.get", summary="Get provider")
async def provider(runtime: RuntimeDep, directory: LocationDep, providerID: str) -> Response:
    entry = next((p for p in runtime.registry.catalog(directory) if p["id"] == providerID), None)
    if entry is None:
        return errors.tagged(404, "ProviderNotFoundError", f"Provider not found: {providerID}", providerID=providerID)
    return await located(directory, views.provider(entry))


@router.get("/reference", operation_id="v2.reference.list", summary="List references")
async def references(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, views.references(runtime.config.load(directory).raw.get("references"), directory))


@router.get("/skill", operation_id="v2.skill.list", summary="List skills")
async def skills(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [skill.as_wire() for skill in runtime.skills.all(directory)])
