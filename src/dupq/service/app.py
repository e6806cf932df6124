"""The HTTP API and the moderators' web page over a question collection (FastAPI, run by uvicorn).

``create_app(collection_dir)`` is the factory (as fastapi-cli expects); ``dupq serve COLL`` runs it
(:mod:`dupq.service.server`). Its routes, one router per area, are in :mod:`dupq.service.routes`::

    POST /similarity  {q1, q2}          -> {similarity, probability, duplicate, threshold, threshold_on}
    POST /search      {question, k, filter, exclude}  -> {results: [{id, key, text, score, probability, duplicate, duplicate_of, metadata}], ...}
    POST /questions   {text, metadata, key, pending}  -> 201 {id, count}   (bearer token; durable when answered;
                                        a key, or an Idempotency-Key header, makes a retry store nothing;
                                        pending: it waits in the review queue, found by no search)
    PUT  /questions/{key}  {text, metadata}  -> {key, id, count, text, metadata}  (token; 404 for a key not stored)
    DELETE /questions/{key}             -> {key, id: null, count}  (token; found by no search once answered)
    POST /questions/{key}/decision {duplicate_of | not_duplicate_of | keep, change}  -> {key, id, count, metadata}
                                        (token; X-Moderator: who, recorded when it leaves the review queue;
                                        409 for one that contradicts an earlier decision, unless change is true)
    POST /questions/{key}/undo          -> {key, id, count, metadata}  (token; the queue's decision taken back)
    GET  /queue?page=&size=&category=&field=  -> {total, categories, items: [{key, text, category, candidates}]}
    GET  /queue/decided?limit=          -> {decisions: [{key, text, action, keys, by, at}]}  (the latest first)
    GET  /questions/{key}               -> {id, key, text, metadata}  (404 for a key not stored)
    GET  /questions?limit&cursor&where  -> {questions: [{id, key, text, metadata}], next_cursor}  (in id order)
    GET  /decisions                     -> {decisions: [{key, other, text, other_text, duplicate}]}
    GET  /health                        -> {status, questions, threshold, threshold_on, calibration}
                                        (calibration: what judges the hits, what it was fitted on, its scopes)
    GET  /metrics                       -> Prometheus' text format (dupq.service.metrics)
    GET  /                              -> the moderators' web page (its HTML, script and styles)
    GET  /openapi.json                  -> FastAPI's schema (no /docs: Swagger UI would load from a CDN)

Every request is validated (questions of 1 to 1,000 characters with at least one word, ``k`` an
integer in 1..100, strict types, bodies of at most ``max_body`` bytes that arrive within
``body_timeout`` seconds, JSON nested at most 33 levels (metadata 32), without NaN, Infinity or
lone surrogates) and a refusal is JSON with a ``detail``: 401 without the token, 404 for a path
that names no route (a trailing ``/`` included: never a redirect), 408 for a body
too slow, 409 for a key stored with another question, 413 for an oversized body, 422 for a bad
field or body, 400 for a question the collection refuses. A failure of the server's own is a 5xx
with a sentence: 507 when its disk is full, 503 with ``Retry-After`` when its store is busy
(another process holding the write lock) or unreachable, 503 for a write to a read-only
collection; a bug is a JSON 500. Every answer carries security headers (a Content-Security-Policy
allowing only the server's own scripts and styles, no framing, no sniffing, no referrer).

The model and the collection are opened once, when the app starts (its lifespan). Encoding and
FAISS run in worker threads, never on the event loop. Requests that arrive while a search is
running wait for the next one and are answered together by *one* ``Collection.search`` call
(one LSTM pass and one FAISS call for the whole group), and concurrent adds share one commit;
on 2 cores this is what lets a few hundred searches a second through with a short tail. Every
``refit_every`` decisions a worker records, its collection's calibration is refitted in a background
thread (:mod:`dupq.service.refit`).

>>> app = create_app("runs/quora-coll", token="s3cret")                  # doctest: +SKIP
>>> uvicorn.run(app, host="127.0.0.1", port=8000)                         # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from dupq.collection.rows import StoreFailure
from dupq.service import auth
from dupq.service.auth import reader, write_token
from dupq.service.batching import Batcher
from dupq.service.errors import REFUSED, UNAUTHORISED, add_error_handlers
from dupq.service.metrics import RequestMetrics
from dupq.service.middleware import BODY_TIMEOUT, MAX_BODY, RequestGuard, SecurityHeaders
from dupq.service.refit import REFIT_EVERY, Refitter
from dupq.service.routes import health, page, questions, queue, search, similarity, stored
from dupq.service.workers import with_these_threads


def open_collection(collection_dir: str | os.PathLike, model_dir: str | os.PathLike | None = None):
    """The collection in ``collection_dir`` (a folder or a Milvus location), with the model in ``model_dir`` if one is given."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    collection = Collection.open(collection_dir, Model.load(model_dir) if model_dir is not None else None)
    if collection.reranker is not None:  # a transformer loads at its first encode: here, not in a search's time
        collection.reranker.encode(["dupq"])
    return collection


def create_app(
    collection_dir,
    model_dir: str | os.PathLike | None = None,
    token: str | None = None,
    *,
    protect_reads: bool = False,
    read_token: str | None = None,
    max_body: int = MAX_BODY,
    body_timeout: float = BODY_TIMEOUT,
    refit_every: int = REFIT_EVERY,
) -> FastAPI:
    """The dupq web app over the collection in ``collection_dir`` (or an open ``Collection``).

    ``token`` guards the writes (default: ``$DUPQ_API_TOKEN``; with neither, writes are refused; an
    empty one, or one no client can send, is refused here: see :func:`~dupq.service.auth.write_token`);
    ``protect_reads`` makes searches, similarities, ``/health`` and ``/metrics`` need it too (the
    page then asks for it); ``read_token`` (default: ``$DUPQ_READ_TOKEN``) protects them as well,
    and lets them through with itself or the write token, never a write. ``model_dir`` overrides
    the collection's model (it must encode as the collection's did). ``refit_every``: refit the collection's
    calibration in the background after every that many decisions (0: never; :mod:`dupq.service.refit`).
    """
    token = write_token(token)
    readers = auth.read_token(read_token, token)
    protect_reads = protect_reads or readers is not None
    app = FastAPI(
        title="dupq",
        summary="Find the old questions a new question duplicates.",
        version=_version(),
        lifespan=_lifespan(collection_dir, model_dir, refit_every),
        docs_url=None,  # Swagger UI and ReDoc load their code from a CDN; /openapi.json stays
        redoc_url=None,
        redirect_slashes=False,  # a redirect would name the Host header's host, which the client chose: 404 instead
    )
    app.state.token, app.state.read_token = token, readers
    app.add_middleware(RequestGuard, limit=max_body, timeout=body_timeout)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestMetrics)  # outermost: every answer counted, refusals of the guards included
    add_error_handlers(app)
    reads = [Depends(reader)] if protect_reads else []
    unauthorised = UNAUTHORISED if protect_reads else {}
    for router in (similarity.router, search.router, queue.router):
        app.include_router(router, dependencies=reads, responses=REFUSED | unauthorised)
    app.include_router(stored.router, dependencies=reads, responses=unauthorised)
    app.include_router(questions.router)
    app.include_router(queue.writes)
    app.include_router(health.router, dependencies=reads, responses=unauthorised)
    app.include_router(page.router)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")
    return app


def _lifespan(collection_dir, model_dir: str | os.PathLike | None, refit_every: int) -> Callable:
    """Open the collection (in a worker thread) when the app starts, with its two batchers and its refitter;
    close it when it stops (after a refit under way)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if isinstance(collection_dir, (str, os.PathLike)):
            collection = await anyio.to_thread.run_sync(open_collection, collection_dir, model_dir)
        else:
            collection = collection_dir
        app.state.collection = collection

        def shared(e: Exception) -> bool:  # the store's failure, not one request's: retrying each alone is no use
            return isinstance(e, StoreFailure)

        searches = with_these_threads(functools.partial(search.search_many, collection))
        app.state.searches = Batcher(searches, shared=shared)
        app.state.adds = Batcher(with_these_threads(functools.partial(questions.add_many, collection)), shared=shared)
        app.state.refits = Refitter(collection, refit_every)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(app.state.refits.wait)
            await anyio.to_thread.run_sync(collection.close)

    return lifespan


def _version() -> str:
    from dupq import __version__

    return __version__
