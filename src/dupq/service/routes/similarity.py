"""``POST /similarity``: how similar two questions are, and whether the model calls them duplicates."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request

from dupq.modeling.predict import judge
from dupq.service.schemas import SimilarityRequest, SimilarityResponse

router = APIRouter()


@router.post("/similarity")
async def similarity(body: SimilarityRequest, request: Request) -> SimilarityResponse:
    """How similar two questions are, and whether the model calls them duplicates."""
    model = request.app.state.collection.model
    j = (await anyio.to_thread.run_sync(judge, model, [body.q1], [body.q2]))[0]
    return SimilarityResponse(**j, threshold_on=model.threshold_on)
