"""The review queue: ``GET /queue`` (the questions waiting, each with its likely duplicates),
``GET /queue/decided`` (its past decisions, who and when) and ``POST /questions/{key}/undo``.

A question waits when added with ``"pending": true`` (:mod:`dupq.collection.review`); a decision
(``POST /questions/{key}/decision``) takes it out and records the ``X-Moderator`` header's name.
"""

from __future__ import annotations

import functools
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request

from dupq.collection.backend import FIELD_PATTERN, TEXT_PATTERN
from dupq.collection.review import shared_words
from dupq.service import metrics
from dupq.service.auth import authorised
from dupq.service.errors import CONFLICT, REFUSED, UNAUTHORISED, UNKNOWN
from dupq.service.schemas import (
    MAX_K,
    Candidate,
    Changed,
    HitOut,
    Key,
    PastDecision,
    PastDecisions,
    QueuedQuestion,
    QueuePage,
)

CANDIDATES = 5  # likely duplicates shown with each waiting question
router = APIRouter()  # the reads (protected as searches are)
writes = APIRouter(dependencies=[Depends(authorised)], responses=REFUSED | UNAUTHORISED)


@router.get("/queue")
async def queue(
    request: Request,
    page: Annotated[int, Query(ge=1, le=1_000_000, description="Which page, from 1.")] = 1,
    size: Annotated[int, Query(ge=1, le=MAX_K, description="Questions on a page.")] = 20,
    category: Annotated[
        str | None, Query(max_length=1_000, pattern=TEXT_PATTERN, description="Only this value.")
    ] = None,
    field: Annotated[str, Query(pattern=FIELD_PATTERN, description="The metadata field of the category.")] = "category",
) -> QueuePage:
    """The questions waiting for a moderator, the oldest first, each with its likely duplicates (pending ones left
    out), their scores and verdicts, and the words it shares with each."""
    collection = request.app.state.collection
    build = functools.partial(queue_page, collection, page, size, field, category)
    return await anyio.to_thread.run_sync(build)


def queue_page(collection, page: int, size: int, field: str, category: str | None) -> QueuePage:
    """One page of the queue (see :func:`queue`): one search of the page's questions for their candidates."""
    waiting = collection.queue()
    categories: dict[str, int] = {}
    for _, _, _, meta in waiting:
        value = category_of(meta, field)
        if value is not None:
            categories[value] = categories.get(value, 0) + 1
    chosen = waiting if category is None else [row for row in waiting if category_of(row[3], field) == category]
    shown = chosen[(page - 1) * size : page * size]
    found = collection.search([text for _, _, text, _ in shown], k=CANDIDATES) if shown else []
    items = [
        QueuedQuestion(
            id=i,
            key=key,
            text=text,
            category=category_of(meta, field),
            metadata=meta,
            candidates=[
                Candidate(
                    **HitOut.model_validate(hit, from_attributes=True).model_dump(), shared=shared_words(text, hit.text)
                )
                for hit in hits
            ],
        )
        for (i, key, text, meta), hits in zip(shown, found)
    ]
    return QueuePage(total=len(chosen), page=page, size=size, field=field, categories=categories, items=items)


def category_of(metadata: dict, field: str) -> str | None:
    """A question's category: its metadata's value of ``field`` as text (a number too), None without one."""
    value = metadata.get(field)
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


@router.get("/queue/decided")
async def decided(
    request: Request, limit: Annotated[int, Query(ge=1, le=1_000, description="How many, the latest first.")] = 50
) -> PastDecisions:
    """The review queue's past decisions still standing (an undone one is gone), the latest first: who, when, what."""
    past = await anyio.to_thread.run_sync(request.app.state.collection.reviewed)
    return PastDecisions(decisions=[PastDecision(key=key, text=text, **record) for key, text, record in past[:limit]])


@writes.post("/questions/{key:path}/undo", responses=UNKNOWN | CONFLICT)
async def undo(key: Key, request: Request) -> Changed:
    """Take back the review queue's decision on ``key``: it waits in the queue again, its decision fields as before
    (409 when it holds no decision from the queue)."""
    collection = request.app.state.collection
    metadata = await anyio.to_thread.run_sync(collection.undo, key)
    metrics.UPDATED.inc()
    i, _, _ = await anyio.to_thread.run_sync(collection.get, key)
    return Changed(key=key, id=i, count=len(collection), metadata=metadata)
