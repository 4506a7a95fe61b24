"""What a team's monitoring reads (none of it in OpenCode, so none of it in the OpenAPI document):
``/metrics`` (Prometheus, when ``--metrics`` is on; behind the password like every route),
``/healthz`` (live) and ``/readyz`` (ready: start-up finished, the database answers), which
a load balancer or Kubernetes probes without credentials (they tell nothing else)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import RuntimeDep
from app.api.errors import named
from app.api.responses import JSONBody
from app.observability import metrics

router = APIRouter(tags=["observability"], include_in_schema=False)

PROBES = frozenset({"/healthz", "/readyz"})


@router.get("/metrics")
async def scrape(runtime: RuntimeDep) -> Response:
    if not runtime.settings.metrics:
        return named(404, "NotFoundError", "Metrics are off: start the server with --metrics (OPENSESSION_METRICS=1)")
    body, content_type = metrics.RECORDER.render(await runtime.gauges())
    return Response(body, media_type=content_type)


@router.get("/healthz")
async def live() -> Response:
    return JSONBody({"live": True})


@router.get("/readyz")
async def ready(runtime: RuntimeDep) -> Response:
    state = await runtime.readiness()
    return JSONBody(state.as_json(), status_code=200 if state.ready else 503)
