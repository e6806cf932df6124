"""``POST /search``: the stored questions most similar to a new one, searched in batches.

Requests that arrive while a search runs are answered together by :func:`search_many`, one
``Collection.search`` per filter and keys left out. The answer (:class:`~dupq.service.schemas.SearchResponse`,
declared for the OpenAPI document) is serialised straight from the hits' values (:func:`hit_fields`):
validating a ``HitOut`` for each hit, then the whole answer again, took a tenth of a search's CPU.
"""

from __future__ import annotations

import json
from operator import attrgetter

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import HTTPException
from pydantic_core import to_json

from dupq.service.schemas import HitOut, SearchRequest, SearchResponse

router = APIRouter()


NO_RERANKER = {409: {"description": '"rerank": true, and the collection has no reranker.'}}

HIT_FIELDS = tuple(HitOut.model_fields)  # an answer's hit: HitOut's fields, in its order
_hit_values = attrgetter(*HIT_FIELDS)


@router.post("/search", response_model=SearchResponse, responses=NO_RERANKER)
async def search(body: SearchRequest, request: Request) -> Response:
    """The ``k`` stored questions most similar to ``question``, best first (but those of ``exclude``)."""
    collection = request.app.state.collection
    if body.rerank and collection.reranker is None:  # a valid request that this collection cannot answer
        raise HTTPException(409, 'this collection has no reranker; search it without "rerank": true.')
    reranked = collection.reranks(body.rerank)  # refused alone, before it joins a batch of others
    hits = await request.app.state.searches.submit((body.question, body.k, body.filter, reranked, body.exclude))
    tiers = collection.tiers_of(reranked)
    suggest, duplicate = float(tiers["suggest"]), float(tiers["duplicate"])  # SearchResponse's floats, 1 as 1.0
    answer = {
        "question": body.question,
        "threshold": duplicate,
        "threshold_on": tiers["on"],
        "tiers": {"suggest": suggest, "duplicate": duplicate, "on": tiers["on"]},
        "results": hits,
    }
    return Response(to_json(answer), media_type="application/json")


def hit_fields(hit) -> dict:
    """A :class:`~dupq.collection.hits.Hit` as the answer's ``HitOut`` says it: its fields, in the schema's order.

    Its values are of their fields' types already (``Collection.search`` gives Python ints, floats and
    strings, the score clipped to [-1, 1]); a test checks that the bytes are those of the validated model.
    """
    return dict(zip(HIT_FIELDS, _hit_values(hit)))


def search_many(collection, items: list[tuple[str, int, dict | None, bool, list[str]]]) -> list[list[dict]]:
    """One ``Collection.search`` per filter, reranking and keys left out among many ``(question, k, filter, rerank,
    exclude)``: the largest ``k``, then each cut to its own (a reranker's order of the candidates does not depend
    on ``k``); each hit as :func:`hit_fields`."""
    groups: dict[tuple, list[int]] = {}
    for n, (_, _, where, rerank, exclude) in enumerate(items):  # most have no filter: no JSON written for them
        same = (None if where is None else json.dumps(where, sort_keys=True), rerank, tuple(sorted(set(exclude))))
        groups.setdefault(same, []).append(n)
    out: list[list[dict]] = [[] for _ in items]
    for members in groups.values():
        _, _, where, rerank, exclude = items[members[0]]
        questions, k = [items[n][0] for n in members], max(items[n][1] for n in members)
        hits = collection.search(questions, k=k, where=where, rerank=rerank, exclude=exclude)
        for n, row in zip(members, hits):
            out[n] = [hit_fields(h) for h in row[: items[n][1]]]
    return out
