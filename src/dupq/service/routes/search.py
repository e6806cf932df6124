"""``POST /search``: the stored questions most similar to a new one, searched in batches.

Requests that arrive while a search runs wait for the next one and are answered together by
:func:`search_many`, one ``Collection.search`` per filter and keys left out (one encoding pass, one FAISS call).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.exceptions import HTTPException

from dupq.service.schemas import HitOut, SearchRequest, SearchResponse

router = APIRouter()


NO_RERANKER = {409: {"description": '"rerank": true, and the collection has no reranker.'}}


@router.post("/search", responses=NO_RERANKER)
async def search(body: SearchRequest, request: Request) -> SearchResponse:
    """The ``k`` stored questions most similar to ``question``, best first (but those of ``exclude``)."""
    collection = request.app.state.collection
    if body.rerank and collection.reranker is None:  # a valid request that this collection cannot answer
        raise HTTPException(409, 'this collection has no reranker; search it without "rerank": true.')
    reranked = collection.reranks(body.rerank)  # refused alone, before it joins a batch of others
    hits = await request.app.state.searches.submit((body.question, body.k, body.filter, reranked, body.exclude))
    tiers = collection.tiers_of(reranked)
    return SearchResponse(
        question=body.question, threshold=tiers["duplicate"], threshold_on=tiers["on"], tiers=tiers, results=hits
    )


def search_many(collection, items: list[tuple[str, int, dict | None, bool, list[str]]]) -> list[list[HitOut]]:
    """One ``Collection.search`` per filter, reranking and keys left out among many ``(question, k, filter, rerank,
    exclude)``: the largest ``k``, then each cut to its own (a reranker's order of the candidates does not depend
    on ``k``)."""
    groups: dict[str, list[int]] = {}
    for n, (_, _, where, rerank, exclude) in enumerate(items):
        groups.setdefault(json.dumps([where, rerank, sorted(set(exclude))], sort_keys=True), []).append(n)
    out: list[list[HitOut]] = [[] for _ in items]
    for members in groups.values():
        _, _, where, rerank, exclude = items[members[0]]
        questions, k = [items[n][0] for n in members], max(items[n][1] for n in members)
        hits = collection.search(questions, k=k, where=where, rerank=rerank, exclude=exclude)
        for n, row in zip(members, hits):
            out[n] = [
                HitOut(
                    id=h.id,
                    key=h.key,
                    duplicate_of=h.duplicate_of,
                    text=h.text,
                    score=h.score,
                    probability=h.probability,
                    duplicate=h.duplicate,
                    tier=h.tier,
                    metadata=h.metadata,
                    ranked_by=h.ranked_by,
                )
                for h in row[: items[n][1]]
            ]
    return out
