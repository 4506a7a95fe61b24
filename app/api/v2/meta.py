"""V2 instance metadata (``/api/skill``...), answered as ``{location, data}`` like every V2 read."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import LocationDep, RuntimeDep
from app.api.v2.pty import located

router = APIRouter(prefix="/api", tags=["v2"])


@router.get("/skill", operation_id="v2.skill.list", summary="List skills")
async def skills(runtime: RuntimeDep, directory: LocationDep) -> Response:
    return await located(directory, [skill.as_wire() for skill in runtime.skills.all(directory)])
