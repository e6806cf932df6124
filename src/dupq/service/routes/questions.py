"""The writes, behind the bearer token: add a question, update or remove one, and a moderator's decision on one.

A key may hold a ``/`` (``faq/17``): the routes take the rest of the path as the key
(``{key:path}``), written as it is or as ``%2F``; ``?``, ``#`` and ``%`` must be percent-encoded.
Concurrent adds share one commit: :func:`add_many` stores every waiting request's question at once.
"""

from __future__ import annotations

import functools
from typing import Annotated
from urllib.parse import unquote

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import HTTPException

from dupq.collection.review import MAX_BY
from dupq.service import metrics
from dupq.service.auth import authorised
from dupq.service.errors import CONFLICT, DECISION_CONFLICT, REFUSED, UNAUTHORISED, UNKNOWN
from dupq.service.schemas import AddRequest, AddResponse, Changed, DecisionRequest, Key, UpdateRequest

router = APIRouter(dependencies=[Depends(authorised)], responses=REFUSED | UNAUTHORISED)


@router.post("/questions", status_code=201, responses=CONFLICT)
async def add_question(
    body: AddRequest,
    request: Request,
    idempotency_key: Annotated[Key | None, Header(description="Same as the body's key.")] = None,
) -> AddResponse:
    """Store a question (and its metadata); it is on disk when this answers.

    With a ``key`` (or an ``Idempotency-Key`` header), sending the same request again stores
    nothing and answers the stored id: a client may retry after a timeout or an error, and a ticket
    sent again after a moderator's decision on it is the same ticket (the decision is not its metadata). With
    ``"pending": true`` it waits in the review queue (``GET /queue``), found by no search until a
    moderator decides.
    """
    if body.key and idempotency_key and body.key != idempotency_key:
        raise HTTPException(409, "the Idempotency-Key header and the body's key differ; give one key.")
    item = (body.text, body.metadata, body.key or idempotency_key, body.pending)
    new_id, count = await request.app.state.adds.submit(item)
    metrics.ADDED.inc()  # a retry of a stored key counts again: requests served, not rows
    return AddResponse(id=new_id, count=count)


@router.delete("/questions/{key:path}", responses=UNKNOWN)
async def remove_question(key: Key, request: Request) -> Changed:
    """Remove the question stored under ``key``: no search of any worker finds it once this answers."""
    collection = request.app.state.collection
    await anyio.to_thread.run_sync(collection.remove, [key])
    metrics.REMOVED.inc()
    return Changed(key=key, id=None, count=len(collection))


@router.put("/questions/{key:path}", responses=UNKNOWN)
async def update_question(key: Key, body: UpdateRequest, request: Request) -> Changed:
    """Give the question of ``key`` a new text and/or metadata (the same again changes nothing); answers what is stored."""
    collection = request.app.state.collection

    def update() -> tuple[int, str, dict]:
        collection.update(key, body.text, body.metadata)
        return collection.get(key)

    i, text, metadata = await anyio.to_thread.run_sync(update)
    metrics.UPDATED.inc()
    return Changed(key=key, id=i, count=len(collection), text=text, metadata=metadata)


@router.post("/questions/{key:path}/decision", responses=UNKNOWN | DECISION_CONFLICT)
async def decide(
    key: Key,
    body: DecisionRequest,
    request: Request,
    moderator: Annotated[
        str | None,
        Header(alias="X-Moderator", max_length=MAX_BY * 12, description="Who decides (UTF-8, percent-encoded)."),
    ] = None,
) -> Changed:
    """A moderator's decision: this question duplicates ``duplicate_of`` (its canonical question), not
    ``not_duplicate_of`` (a key, or a list: none of them), or is a new question (``keep``). A question waiting
    in the review queue leaves it, with the ``X-Moderator`` name and the time recorded. One that contradicts an
    earlier decision is refused (409) unless ``change`` is true; then it is recorded as a change, its metadata's
    ``decision_changes`` keeping what it replaced and when."""
    distinct = body.not_duplicate_of if isinstance(body.not_duplicate_of, list) else [body.not_duplicate_of]
    if key in (body.duplicate_of, *distinct):  # a valid request that the stored question refuses
        raise HTTPException(409, f"a question cannot be judged against itself ({key!r}).")
    by = moderator_name(moderator)
    collection = request.app.state.collection
    decide = functools.partial(
        collection.decide,
        key,
        duplicate_of=body.duplicate_of,
        not_duplicate_of=body.not_duplicate_of,
        keep=bool(body.keep),
        by=by,
        change=body.change,
    )
    metadata = await anyio.to_thread.run_sync(decide)
    metrics.UPDATED.inc()
    request.app.state.refits.decided(0 if body.keep else 1 if body.duplicate_of is not None else len(distinct))
    i, _, _ = await anyio.to_thread.run_sync(collection.get, key)
    return Changed(key=key, id=i, count=len(collection), metadata=metadata)


def moderator_name(header: str | None) -> str | None:
    """The name an ``X-Moderator`` header gives (percent-encoded UTF-8), as printable text of at most
    :data:`~dupq.collection.review.MAX_BY` characters; None for none. A name is a label, so it is cleaned, never refused."""
    if header is None:
        return None
    name = "".join(c for c in unquote(header, errors="replace") if c.isprintable()).strip()
    return name[:MAX_BY].strip() or None


def add_many(collection, items: list[tuple[str, dict, str | None, bool]]) -> list[tuple[int, int]]:
    """One ``Collection.add`` (one commit) for many ``(text, metadata, key, pending)``.

    ``add`` raises only before its commit (nothing stored), so the batcher's retry of each
    request alone never stores a question twice.
    """
    texts, metadata, keys, pending = (list(column) for column in zip(*items))
    ids = collection.add(texts, metadata, keys, pending=pending)
    count = len(collection)
    return [(i, count) for i in ids]
