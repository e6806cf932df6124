"""``POST /search``: the stored questions most similar to a new one, searched in batches.

Requests that arrive while a search runs wait for the next one and are answered together by
:func:`search_many`, one ``Collection.search`` per filter and keys left out (one encoding pass, one FAISS call).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request

from dupq.service.schemas import HitOut, SearchRequest, SearchResponse

router = APIRouter()


@router.post("/search")
async def search(body: SearchRequest, request: Request) -> SearchResponse:
    """The ``k`` stored questions most similar to ``question``, best first (but those of ``exclude``)."""
    hits = await request.app.state.searches.submit((body.question, body.k, body.filter, body.exclude))
    collection = request.app.state.collection
    return SearchResponse(
        question=body.question,
        threshold=collection.threshold,
        threshold_on=collection.model.threshold_on,
        results=hits,
    )


def search_many(collection, items: list[tuple[str, int, dict | None, list[str]]]) -> list[list[HitOut]]:
    """One ``Collection.search`` per filter and excluded keys among many ``(question, k, filter, exclude)``: the
    largest ``k``, then each cut to its own."""
    groups: dict[str, list[int]] = {}
    for n, (_, _, where, exclude) in enumerate(items):
        groups.setdefault(json.dumps([where, sorted(set(exclude))], sort_keys=True), []).append(n)
    out: list[list[HitOut]] = [[] for _ in items]
    for members in groups.values():
        _, _, where, exclude = items[members[0]]
        k = max(items[n][1] for n in members)
        hits = collection.search([items[n][0] for n in members], k=k, where=where, exclude=exclude)
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
                    metadata=h.metadata,
                )
                for h in row[: items[n][1]]
            ]
    return out
