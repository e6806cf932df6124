"""The HTTP API and the moderators' web page over a question collection (FastAPI, run by uvicorn).

``create_app(collection_dir)`` is the factory (as fastapi-cli expects); ``dupq serve COLL`` runs it
(:mod:`dupq.service.server`); its routes, one router per area, are in :mod:`dupq.service.routes`. docs/serve.md lists
every route, what each answers and what bad input gets: a refusal is JSON with a ``detail`` (401, 404 for a path that
names no route, never a redirect, 408, 409, 413, 422, 400), a failure of the server's own a 5xx with a sentence (507
disk full, 503 with ``Retry-After`` busy or unreachable or read-only), a bug a JSON 500; every answer carries the
security headers.

The model and the collection are opened once, in the app's lifespan. Encoding and FAISS run in worker threads, never on
the event loop; requests that arrive during a search are answered together by one ``Collection.search`` call, and
concurrent adds share one commit (what lets a few hundred searches a second through on 2 cores). Every ``refit_every``
recorded decisions the calibration is refitted in a background thread (:mod:`dupq.service.refit`).

>>> app = create_app("runs/quora-coll", token="s3cret")                  # doctest: +SKIP
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
    collection.load_reranker()  # its network and stored vectors: here, not in a search's time
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

    ``token`` guards the writes (default: ``$DUPQ_API_TOKEN``; with neither, writes are refused; an empty one, or one no
    client can send, is refused here: see :func:`~dupq.service.auth.write_token`); ``protect_reads`` makes searches,
    similarities, ``/health`` and ``/metrics`` need it too (the page then asks for it); ``read_token`` (default:
    ``$DUPQ_READ_TOKEN``) protects them as well, and lets them through with itself or the write token, never a write.
    ``model_dir`` overrides the collection's model (it must encode as the collection's did). ``refit_every``: refit the
    collection's calibration in the background after every that many decisions (0: never; :mod:`dupq.service.refit`).
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
