"""The HTTP API and the moderators' web page over a question collection (FastAPI, run by uvicorn).

``create_app(collection_dir)`` is the factory (as fastapi-cli expects); ``dupq serve COLL`` runs it::

    POST /similarity  {q1, q2}          -> {similarity, probability, duplicate, threshold, threshold_on}
    POST /search      {question, k, filter}  -> {results: [{id, key, text, score, probability, duplicate, duplicate_of, metadata}], ...}
    POST /questions   {text, metadata, key}  -> 201 {id, count}   (bearer token; durable when answered;
                                        a key, or an Idempotency-Key header, makes a retry store nothing)
    PUT  /questions/{key}  {text, metadata}  -> {key, id, count}  (token; 404 for a key not stored)
    DELETE /questions/{key}             -> {key, id: null, count}  (token; found by no search once answered)
    POST /questions/{key}/decision {duplicate_of | not_duplicate_of}  -> {key, id, count, metadata}  (token)
    GET  /health                        -> {status, questions, threshold, threshold_on}
    GET  /metrics                       -> Prometheus' text format (dupq.service.metrics)
    GET  /                              -> the web page (static/index.html, app.css, app.js)
    GET  /openapi.json                  -> FastAPI's schema (no /docs: Swagger UI would load from a CDN)

Every request is validated (questions of 1 to 1,000 characters with at least one word, ``k`` an
integer in 1..100, strict types, bodies of at most ``max_body`` bytes that arrive within
``body_timeout`` seconds, JSON nested at most 33 levels (metadata 32), without NaN, Infinity or
lone surrogates) and a refusal is JSON with a ``detail``: 401 without the token, 408 for a body
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
on 2 cores this is what lets a few hundred searches a second through with a short tail.

>>> app = create_app("runs/quora-coll", token="s3cret")                  # doctest: +SKIP
>>> uvicorn.run(app, host="127.0.0.1", port=8000)                         # doctest: +SKIP
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from dupq.collection.location import Location
from dupq.collection.rows import KeyConflict, StoreFailure, UnknownKey
from dupq.core.errors import DupqError
from dupq.modeling.predict import judge
from dupq.service import metrics
from dupq.service.batching import Batcher
from dupq.service.connections import allow_many_connections, server_config
from dupq.service.metrics import RequestMetrics
from dupq.service.middleware import BODY_TIMEOUT, MAX_BODY, RequestGuard, SecurityHeaders
from dupq.service.schemas import (
    AddRequest,
    AddResponse,
    Changed,
    DecisionRequest,
    Health,
    HitOut,
    Key,
    SearchRequest,
    SearchResponse,
    SimilarityRequest,
    SimilarityResponse,
    UpdateRequest,
)
from dupq.service.workers import limit_blas, run_workers

STATIC = Path(__file__).parents[1] / "static"
TOKEN_ENV = "DUPQ_API_TOKEN"
log = logging.getLogger(__name__)


def open_collection(collection_dir: str | os.PathLike, model_dir: str | os.PathLike | None = None):
    """The collection in ``collection_dir`` (a folder or a Milvus location), with the model in ``model_dir`` if one is given."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    return Collection.open(collection_dir, Model.load(model_dir) if model_dir is not None else None)


def create_app(
    collection_dir,
    model_dir: str | os.PathLike | None = None,
    token: str | None = None,
    *,
    protect_reads: bool = False,
    max_body: int = MAX_BODY,
    body_timeout: float = BODY_TIMEOUT,
) -> FastAPI:
    """The dupq web app over the collection in ``collection_dir`` (or an open ``Collection``).

    ``token`` guards the writes (default: ``$DUPQ_API_TOKEN``; with neither, writes are refused; an
    empty one, or one no client can send, is refused here: see :func:`write_token`);
    ``protect_reads`` makes searches, similarities and ``/health`` need it too (the page then asks
    for it). ``model_dir`` overrides the collection's model (it must encode as the collection's did).
    """
    token = write_token(token)
    app = FastAPI(
        title="dupq",
        summary="Find the old questions a new question duplicates.",
        version=_version(),
        lifespan=_lifespan(collection_dir, model_dir),
        docs_url=None,  # Swagger UI and ReDoc load their code from a CDN; /openapi.json stays
        redoc_url=None,
    )
    app.add_middleware(RequestGuard, limit=max_body, timeout=body_timeout)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestMetrics)  # outermost: every answer counted, refusals of the guards included
    _add_error_handlers(app)
    authorised = _bearer_check(token)
    reads = [Depends(authorised)] if protect_reads else []
    read_refusals = REFUSED | (UNAUTHORISED if protect_reads else {})
    _add_judging_routes(app, reads, read_refusals)
    _add_write_route(app, authorised)
    _add_status_routes(app, reads, UNAUTHORISED if protect_reads else {})
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


UNAUTHORISED = {401: {"description": "Missing or wrong bearer token."}}
REFUSED = {
    400: {"description": "A question the model cannot read."},
    408: {"description": "Body too slow."},
    413: {"description": "Body too large."},
    503: {"description": "The store is busy or unreachable (see Retry-After), or read-only."},
    507: {"description": "The server's disk is full; nothing was stored."},
}
RETRY_AFTER = 5  # seconds a client is asked to wait before retrying when the store is busy or unreachable
# A store's failure as the client sees it (the server's log has the full sentence, paths included).
STORE_ANSWERS = {
    "full": (507, "the server's disk is full; nothing was stored."),
    "busy": (503, "the collection is busy (another process holds its write lock); nothing was stored, try again."),
    "unreachable": (503, "the collection's store cannot be reached now; try again."),
    "read-only": (503, "the collection is read-only on this server; nothing was stored."),
}
BROKEN_STORE = (500, "the server cannot use its collection (it may be damaged); the server log has the details.")
UNKNOWN = {404: {"description": "No question is stored under that key."}}
CONFLICT = {
    409: {
        "description": "The key is stored already with another question or metadata, or the header's and body's keys differ."
    }
}


def _lifespan(collection_dir, model_dir: str | os.PathLike | None) -> Callable:
    """Open the collection (in a worker thread) when the app starts, with its two batchers; close it when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if isinstance(collection_dir, (str, os.PathLike)):
            collection = await anyio.to_thread.run_sync(open_collection, collection_dir, model_dir)
        else:
            collection = collection_dir
        app.state.collection = collection

        def shared(e: Exception) -> bool:  # the store's failure, not one request's: retrying each alone is no use
            return isinstance(e, StoreFailure)

        app.state.searches = Batcher(lambda items: _search(collection, items), shared=shared)
        app.state.adds = Batcher(lambda items: _add(collection, items), shared=shared)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(collection.close)

    return lifespan


def write_token(token: str | None = None) -> str | None:
    """The bearer token that guards writes: ``token``, else ``$DUPQ_API_TOKEN``; None (writes disabled) when neither is set.

    A token that would let anyone write, or that no client can send, is refused at start in one
    sentence: an empty or blank one, one with blanks at its ends (HTTP drops them from a header) and
    one that is not Latin-1 (a header's bytes).
    """
    where = "the token" if token is not None else f"${TOKEN_ENV}"
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    if token is None:
        return None
    if not isinstance(token, str) or not token.strip():
        raise DupqError(
            f"{where} is empty or blank, which would let anyone write; give a real token, or none to disable writes."
        )
    if token != token.strip():
        raise DupqError(f"{where} begins or ends with a blank, which HTTP drops from a header; remove it.")
    try:
        token.encode("latin-1")
    except UnicodeEncodeError:
        raise DupqError(
            f"{where} holds a character that is not Latin-1, which no HTTP client can send in a header; use ASCII."
        ) from None
    return token


def _bearer_check(token: str | None) -> Callable:
    """The dependency that lets a request through with ``token`` as its bearer token (none: writes are disabled)."""
    bearer = HTTPBearer(auto_error=False, description=f"The server's ${TOKEN_ENV}.")

    def authorised(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if token is None:
            raise HTTPException(403, f"writes are disabled: the server was started without ${TOKEN_ENV}.")
        given = credentials.credentials if credentials else ""
        if not secrets.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
            detail = "this request needs the bearer token" if not given else "the bearer token is wrong"
            raise HTTPException(401, detail + ".", headers={"WWW-Authenticate": "Bearer"})

    return authorised


def answer_to(e: DupqError) -> tuple[int, str, dict[str, str]]:
    """The HTTP status, detail and headers of a library error: the one place where store errors become statuses.

    The caller's mistake is a 4xx with the library's sentence (409 for a key stored with another
    question, 400 otherwise); a :class:`~dupq.collection.rows.StoreFailure` is the server's own: 507
    for a full disk, 503 for a busy, unreachable or read-only store (with ``Retry-After`` where
    waiting helps), else 500, each with a sentence of :data:`STORE_ANSWERS`.
    """
    if isinstance(e, StoreFailure):
        status, detail = STORE_ANSWERS.get(e.reason, BROKEN_STORE)
        retry = {"Retry-After": str(RETRY_AFTER)} if e.reason in ("busy", "unreachable") else {}
        return status, detail, retry
    if isinstance(e, UnknownKey):
        return 404, str(e).split(" is stored in ")[0] + ".", {}  # the sentence without the server's path
    return 409 if isinstance(e, KeyConflict) else 400, str(e), {}


def _add_error_handlers(app: FastAPI) -> None:
    """A library error by :func:`answer_to`, a full disk 507, a bad body 422, each with a ``detail``.

    A bug's JSON 500 is made by :class:`~dupq.service.middleware.SecurityHeaders`, so that it
    carries the security headers too.
    """

    @app.exception_handler(DupqError)
    async def library_error(request: Request, e: DupqError) -> JSONResponse:
        status, detail, headers = answer_to(e)
        if status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, e)
        return JSONResponse({"detail": detail}, status_code=status, headers=headers)

    @app.exception_handler(OSError)
    async def environment(request: Request, e: OSError) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, e)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return JSONResponse({"detail": "the server's disk is full; nothing was stored."}, status_code=507)
        return JSONResponse({"detail": f"the server cannot use its files ({e.strerror or e})."}, status_code=500)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, e: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input, which may not even be encodable (NaN, "\ud800").
        errors = [{"type": err["type"], "loc": list(err["loc"]), "msg": err["msg"]} for err in e.errors()]
        return JSONResponse({"detail": errors}, status_code=422)


def _add_judging_routes(app: FastAPI, reads: list, responses: dict) -> None:
    """``POST /similarity`` and ``POST /search``; ``reads`` holds the token check when reads are protected."""

    @app.post("/similarity", dependencies=reads, responses=responses)
    async def similarity(body: SimilarityRequest, request: Request) -> SimilarityResponse:
        """How similar two questions are, and whether the model calls them duplicates."""
        model = request.app.state.collection.model
        j = (await anyio.to_thread.run_sync(judge, model, [body.q1], [body.q2]))[0]
        return SimilarityResponse(**j, threshold_on=model.threshold_on)

    @app.post("/search", dependencies=reads, responses=responses)
    async def search(body: SearchRequest, request: Request) -> SearchResponse:
        """The ``k`` stored questions most similar to ``question``, best first."""
        hits = await request.app.state.searches.submit((body.question, body.k, body.filter))
        collection = request.app.state.collection
        return SearchResponse(
            question=body.question,
            threshold=collection.threshold,
            threshold_on=collection.model.threshold_on,
            results=hits,
        )


def _add_write_route(app: FastAPI, authorised: Callable) -> None:
    """``POST /questions``, behind the bearer token."""

    @app.post(
        "/questions", status_code=201, dependencies=[Depends(authorised)], responses=REFUSED | UNAUTHORISED | CONFLICT
    )
    async def add_question(
        body: AddRequest,
        request: Request,
        idempotency_key: Annotated[Key | None, Header(description="Same as the body's key.")] = None,
    ) -> AddResponse:
        """Store a question (and its metadata); it is on disk when this answers.

        With a ``key`` (or an ``Idempotency-Key`` header), sending the same request again stores
        nothing and answers the stored id: a client may retry after a timeout or an error.
        """
        if body.key and idempotency_key and body.key != idempotency_key:
            raise HTTPException(409, "the Idempotency-Key header and the body's key differ; give one key.")
        new_id, count = await request.app.state.adds.submit((body.text, body.metadata, body.key or idempotency_key))
        metrics.ADDED.inc()  # a retry of a stored key counts again: requests served, not rows
        return AddResponse(id=new_id, count=count)

    writes = {"dependencies": [Depends(authorised)], "responses": REFUSED | UNAUTHORISED | UNKNOWN}

    @app.delete("/questions/{key}", **writes)
    async def remove_question(key: Key, request: Request) -> Changed:
        """Remove the question stored under ``key``: no search of any worker finds it once this answers."""
        collection = request.app.state.collection
        await anyio.to_thread.run_sync(collection.remove, [key])
        metrics.REMOVED.inc()
        return Changed(key=key, id=None, count=len(collection))

    @app.put("/questions/{key}", **writes)
    async def update_question(key: Key, body: UpdateRequest, request: Request) -> Changed:
        """Give the question of ``key`` a new text and/or metadata (the same again changes nothing)."""
        collection = request.app.state.collection
        i = await anyio.to_thread.run_sync(functools.partial(collection.update, key, body.text, body.metadata))
        metrics.UPDATED.inc()
        return Changed(key=key, id=i, count=len(collection))

    @app.post("/questions/{key}/decision", **{**writes, "responses": writes["responses"] | CONFLICT})
    async def decide(key: Key, body: DecisionRequest, request: Request) -> Changed:
        """A moderator's decision: this question duplicates ``duplicate_of`` (its canonical question), or not ``not_duplicate_of``."""
        if key in (body.duplicate_of, body.not_duplicate_of):  # a valid request that the stored question refuses
            raise HTTPException(409, f"a question cannot be judged against itself ({key!r}).")
        collection = request.app.state.collection
        decide = functools.partial(
            collection.decide, key, duplicate_of=body.duplicate_of, not_duplicate_of=body.not_duplicate_of
        )
        metadata = await anyio.to_thread.run_sync(decide)
        metrics.UPDATED.inc()
        i, _, _ = await anyio.to_thread.run_sync(collection.get, key)
        return Changed(key=key, id=i, count=len(collection), metadata=metadata)


def _add_status_routes(app: FastAPI, reads: list, responses: dict) -> None:
    """``GET /health`` and the web page at ``/``."""

    @app.get("/health", dependencies=reads, responses=responses)
    async def health(request: Request) -> Health:
        """The server is up: how many questions it holds and the duplicate threshold."""
        collection = request.app.state.collection
        return Health(
            status="ok",
            questions=len(collection),
            threshold=collection.threshold,
            threshold_on=collection.model.threshold_on,
        )

    @app.get("/metrics", dependencies=reads, responses=responses, response_class=Response)
    async def prometheus(request: Request) -> Response:
        """The service's counters in Prometheus' text format (every worker's, with several)."""
        body, content_type = await anyio.to_thread.run_sync(metrics.exposition, request.app.state.collection)
        return Response(body, media_type=content_type)

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")


def _search(collection, items: list[tuple[str, int, dict | None]]) -> list[list[HitOut]]:
    """One ``Collection.search`` per filter among many ``(question, k, filter)``: the largest ``k``, then each cut to its own."""
    groups: dict[str, list[int]] = {}
    for n, (_, _, where) in enumerate(items):
        groups.setdefault(json.dumps(where, sort_keys=True), []).append(n)
    out: list[list[HitOut]] = [[] for _ in items]
    for members in groups.values():
        where = items[members[0]][2]
        hits = collection.search([items[n][0] for n in members], k=max(items[n][1] for n in members), where=where)
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


def _add(collection, items: list[tuple[str, dict, str | None]]) -> list[tuple[int, int]]:
    """One ``Collection.add`` (one commit) for many ``(text, metadata, key)``.

    ``add`` raises only before its commit (nothing stored), so the batcher's retry of each
    request alone never stores a question twice.
    """
    ids = collection.add([t for t, _, _ in items], [m for _, m, _ in items], [k for _, _, k in items])
    count = len(collection)
    return [(i, count) for i in ids]


def _version() -> str:
    from dupq import __version__

    return __version__


def serve(
    collection_dir: str | os.PathLike,
    model_dir: str | os.PathLike | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    protect_reads: bool = False,
    threads: int = 1,
    log: Callable[[str], None] = print,
    workers: int = 1,
) -> None:
    """Open the collection (a bad folder fails here, as one sentence) and serve it until stopped.

    ``workers`` processes serve it, each with its own copy of the model and the index (see
    :mod:`dupq.service.workers`); one is served in this process. ``threads`` is torch's and the
    BLAS's thread count for encoding (and FAISS's too with several workers): with searches batched there is one
    encoding call at a time, and on a small machine the event loop needs the other core.
    """
    import torch
    import uvicorn

    if workers < 1:
        raise DupqError(f"workers must be at least 1, not {workers}.")
    if workers > 1 and Location.parse(collection_dir).one_process:
        raise DupqError(
            f"{collection_dir} is a milvus-lite file, which one process opens at a time: serve it with "
            "--workers 1, or keep the collection on a Milvus server."
        )
    token = write_token()  # before the port is taken: a token no one should use is refused first
    if threads:
        torch.set_num_threads(threads)
        limit_blas(threads)
    listener = listen(host, port)  # before anything is announced: a port in use fails here, as one sentence
    try:
        collection = open_collection(collection_dir, model_dir)
    except BaseException:
        listener.close()
        raise
    log(
        f"serving {len(collection):,} questions from {collection_dir} on http://{host}:{port}/ "
        f"({workers} worker{'s' if workers > 1 else ''}; "
        f"writes {'need the bearer token' if token else f'disabled: set ${TOKEN_ENV}'})"
    )
    if workers > 1:
        collection.close()  # each worker opens its own
        os.environ[metrics.MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="dupq-metrics-")  # the workers' shared values
        factory = functools.partial(create_app, collection_dir, model_dir, token, protect_reads=protect_reads)
        try:
            run_workers(factory, listener, workers, threads)
        finally:
            listener.close()
            shutil.rmtree(os.environ.pop(metrics.MULTIPROCESS_ENV), ignore_errors=True)
        return
    app = create_app(collection, token=token, protect_reads=protect_reads)
    allow_many_connections()
    uvicorn.Server(server_config(app)).run(sockets=[listener])


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or a :class:`DupqError` saying why it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise DupqError(
            f"cannot listen on {host}:{port} ({e.strerror or e}); is another server using that port?"
        ) from None
    return sock
