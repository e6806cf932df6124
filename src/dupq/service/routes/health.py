"""``GET /health`` (the server is up, and what it holds) and ``GET /metrics`` (its counters, for Prometheus)."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response

from dupq.service import metrics
from dupq.service.schemas import Health

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Health:
    """The server is up: how many questions it holds, the duplicate threshold and what its calibration was fitted on."""
    collection = request.app.state.collection
    return Health(
        status="ok",
        questions=len(collection),
        threshold=collection.threshold,
        threshold_on=collection.model.threshold_on,
        calibration=collection.calibration_info(),
    )


@router.get("/metrics", response_class=Response)
async def prometheus(request: Request) -> Response:
    """The service's counters in Prometheus' text format (every worker's, with several)."""
    body, content_type = await anyio.to_thread.run_sync(metrics.exposition, request.app.state.collection)
    return Response(body, media_type=content_type)
