"""The HTTP API and the moderators' web page over a question collection (FastAPI, run by uvicorn).

``create_app(collection_dir)`` is the factory (as fastapi-cli expects); ``dupq serve COLL`` runs it::

    POST /similarity  {q1, q2}          -> {similarity, probability, duplicate, threshold, threshold_on}
    POST /search      {question, k}     -> {results: [{id, text, score, probability, duplicate, metadata}], ...}
    POST /questions   {text, metadata, key}  -> 201 {id, count}   (bearer token; durable when answered;
                                        a key, or an Idempotency-Key header, makes a retry store nothing)
    GET  /health                        -> {status, questions, threshold, threshold_on}
    GET  /                              -> the web page (static/index.html, app.css, app.js)
    GET  /openapi.json                  -> FastAPI's schema (no /docs: Swagger UI would load from a CDN)

Every request is validated (questions of 1 to 1,000 characters with at least one word, ``k`` an
integer in 1..100, strict types, bodies of at most ``max_body`` bytes that arrive within
``body_timeout`` seconds, JSON without NaN, Infinity or lone surrogates) and a refusal is JSON
with a ``detail``: 401 without the token, 408 for a body too slow, 409 for a key stored with
another question, 413 for an oversized body, 422 for a bad field or body, 400 for a question the
collection refuses; an unexpected failure is a JSON 500 too. Every answer carries security
headers (a Content-Security-Policy allowing only the server's own scripts and styles, no framing,
no sniffing, no referrer).

The model and the collection are opened once, when the app starts (its lifespan). Encoding and
FAISS run in worker threads, never on the event loop. Requests that arrive while a search is
running wait for the next one and are answered together by *one* ``Collection.search`` call
(one LSTM pass and one FAISS call for the whole group), and concurrent adds share one commit;
on 2 cores this is what lets a few hundred searches a second through with a short tail.

>>> app = create_app("runs/quora-coll", token="s3cret")                  # doctest: +SKIP
>>> uvicorn.run(app, host="127.0.0.1", port=8000)                         # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from dupq.files import DupqError
from dupq.predict import judge
from dupq.tokenizer import check_question

STATIC = Path(__file__).parent / "static"
TOKEN_ENV = "DUPQ_API_TOKEN"
MAX_QUESTION = 1000  # characters in one question
MAX_K = 100  # results of one search
MAX_BODY = 64 * 1024  # bytes of one request body: a 1,000-character question plus metadata fits easily
MAX_BATCH = 64  # requests answered by one search or add call
MAX_KEY = 200  # characters in an idempotency key
BODY_TIMEOUT = 10.0  # seconds a request body may take to arrive: a slow client cannot hold a connection open
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
     b"form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
log = logging.getLogger(__name__)


def _question(text: str) -> str:
    try:
        return check_question(text)  # the rule of every entry point: valid Unicode, at least one word
    except DupqError as e:
        raise ValueError(str(e).removeprefix("the question ")) from None


# The schema's words for check_question's rule (one character neither blank nor ASCII punctuation),
# so that schema-driven clients and fuzzers know it; _question enforces it, with a readable message.
# The class lists every character that str.split() or the punctuation strip removes.
WORD = r"[^\u0009-\u000d\u001c-\u002f\u003a-\u0040\u005b-\u0060\u007b-\u007e\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]"
Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUESTION,
        description="A question: 1 to 1,000 characters, with at least one word.",
        json_schema_extra={"pattern": WORD},
    ),
    AfterValidator(_question),
]
Score = Annotated[float, AfterValidator(lambda x: min(1.0, max(-1.0, x)))]  # float32 rounding can reach 1.0000001
Key = Annotated[str, Field(min_length=1, max_length=MAX_KEY, pattern=r"^[!-~]+$", description="Printable ASCII, no spaces.")]
STRICT = ConfigDict(extra="forbid", strict=True)  # "3" is not 3, true is not 1


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: 3 or 3.0, never true or "3" (an integral float is then made an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a JSON integer")
    return value


class SimilarityRequest(BaseModel):
    model_config = STRICT
    q1: Question
    q2: Question


class SimilarityResponse(BaseModel):
    similarity: Score  # cosine similarity of the two questions' vectors, in [-1, 1]
    probability: float | None  # calibrated P(duplicate); null for a model without a calibration
    duplicate: bool  # the similarity (or probability, see threshold_on) above the model's threshold
    threshold: float
    threshold_on: str  # "similarity" or "probability": what the threshold is compared with


class SearchRequest(BaseModel):
    model_config = STRICT
    question: Question
    k: Annotated[int, Field(strict=False), BeforeValidator(_json_integer)] = Field(
        10, ge=1, le=MAX_K, description="How many stored questions to return (1 to 100)."
    )


class HitOut(BaseModel):
    id: int
    text: str
    score: Score  # cosine similarity to the question
    probability: float | None  # calibrated P(duplicate); null without a calibration
    duplicate: bool
    metadata: dict[str, Any]


class SearchResponse(BaseModel):
    question: str
    threshold: float
    threshold_on: str
    results: list[HitOut]


class AddRequest(BaseModel):
    model_config = STRICT
    text: Question
    metadata: dict[str, Any] = Field(default_factory=dict, description="Any JSON object stored with the question.")
    key: Key | None = Field(None, description="Your id for the question: a key stored already stores nothing and answers its id.")


class AddResponse(BaseModel):
    id: int
    count: int  # questions in the collection after this one


class Health(BaseModel):
    status: str
    questions: int
    threshold: float
    threshold_on: str


class Batcher:
    """Run ``fn(items) -> results`` in a worker thread for every request waiting, one call at a time.

    A request waits while the previous call runs; then every waiting request (up to ``limit``)
    goes into the next call. Under load the calls grow, so the fixed cost of a call (a torch
    forward pass, a FAISS search, a commit) is shared; with a single request it is one call as
    before. If a call raises, each of its requests is retried alone, so one bad request fails
    only itself.
    """

    def __init__(self, fn: Callable[[list], list], limit: int = MAX_BATCH):
        self.fn, self.limit = fn, limit
        self.pending: list[tuple[Any, asyncio.Future]] = []
        self.running = False

    async def submit(self, item: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((item, future))
        if not self.running:
            self.running = True
            asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending[: self.limit], self.pending[self.limit :]
                outcomes = await self._run([item for item, _ in batch])
                for (_, future), (result, error) in zip(batch, outcomes):
                    if future.done():  # the client went away
                        continue
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
        finally:
            self.running = False

    async def _run(self, items: list) -> list[tuple[Any, Exception | None]]:
        """``(result, None)`` or ``(None, error)`` for each item."""
        try:
            return [(r, None) for r in await anyio.to_thread.run_sync(self.fn, items)]
        except Exception as e:
            if len(items) == 1:
                return [(None, e)]
        return [(await self._run([item]))[0] for item in items]


class RequestGuard:
    """ASGI middleware in front of every route: the checks a body needs before any route reads it.

    A body is at most ``limit`` bytes (the declared ``Content-Length`` is checked first, then
    what actually arrives, so a chunked body cannot slip past; 413), arrives within ``timeout``
    seconds (408: a slow client cannot hold a connection), and, when it is JSON, holds neither
    ``NaN``/``Infinity`` (which Python's parser accepts but JSON does not) nor lone surrogates
    (``"\\ud800"``, not Unicode): both are refused with 422 here, once for every route.
    """

    def __init__(self, app, limit: int, timeout: float = BODY_TIMEOUT):
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                return await _refuse(scope, receive, send, 400, "the Content-Length header is not a number.")
            if int(declared) > self.limit:
                return await _refuse(scope, receive, send, 413, f"the request body is over {self.limit:,} bytes.")
        body, more = bytearray(), True
        try:
            async with asyncio.timeout(self.timeout):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                    if len(body) > self.limit:
                        return await _refuse(scope, receive, send, 413, f"the request body is over {self.limit:,} bytes.")
        except TimeoutError:
            return await _refuse(scope, receive, send, 408, f"the request body did not arrive within {self.timeout:g} seconds.")
        problem = _json_problem(bytes(body)) if body else None
        if problem:
            return await _refuse(scope, receive, send, 422, [{"type": "json_invalid", "loc": ["body"], "msg": problem}])
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for the disconnect, as Starlette expects
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


class _NotFinite(ValueError):
    pass


def _not_finite(constant: str):
    raise _NotFinite(constant)


def _json_problem(body: bytes) -> str | None:
    """Why a JSON body must be refused although Python's parser takes it; None if it is fine (or not JSON)."""
    try:
        value = json.loads(body, parse_constant=_not_finite)
    except _NotFinite as e:
        return f"the body holds {e}, which is not a JSON number; send finite numbers only."
    except UnicodeDecodeError as e:
        return f"the body is not UTF-8 text (byte {e.start + 1} cannot be decoded)."
    except ValueError:
        return None  # not JSON (or not UTF-8): the route's own parser refuses it
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "the body holds a lone surrogate escape (such as \\ud800), which is not Unicode text."
    return None


class SecurityHeaders:
    """ASGI middleware: every answer (the page, the API, the refusals) carries :data:`SECURITY_HEADERS`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


async def _refuse(scope, receive, send, status: int, detail) -> None:
    await JSONResponse({"detail": detail}, status_code=status, headers={"Connection": "close"})(scope, receive, send)


def open_collection(collection_dir: str | os.PathLike, model_dir: str | os.PathLike | None = None):
    """The collection in ``collection_dir`` (a folder or a Milvus location), with the model in ``model_dir`` if one is given."""
    from dupq.collection import Collection, is_milvus
    from dupq.model import Model

    location = collection_dir if is_milvus(collection_dir) else Path(collection_dir)
    if isinstance(location, Path) and not location.is_dir():
        raise DupqError(f"collection folder {location} does not exist; build one with `dupq index build`.")
    return Collection.open(location, Model.load(model_dir) if model_dir is not None else None)


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

    ``token`` guards the writes (default: ``$DUPQ_API_TOKEN``; with neither, writes are refused);
    ``protect_reads`` makes searches, similarities and ``/health`` need it too (the page then asks
    for it). ``model_dir`` overrides the collection's model (it must encode as the collection's did).
    """
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
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
}
CONFLICT = {409: {"description": "The key is stored already with another question or metadata, or the header's and body's keys differ."}}


def _lifespan(collection_dir, model_dir: str | os.PathLike | None) -> Callable:
    """Open the collection (in a worker thread) when the app starts, with its two batchers; close it when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if isinstance(collection_dir, (str, os.PathLike)):
            collection = await anyio.to_thread.run_sync(open_collection, collection_dir, model_dir)
        else:
            collection = collection_dir
        app.state.collection = collection
        app.state.searches = Batcher(lambda items: _search(collection, items))
        app.state.adds = Batcher(lambda items: _add(collection, items))
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(collection.close)

    return lifespan


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


def _add_error_handlers(app: FastAPI) -> None:
    """A user's mistake is a 400 (409 for a key conflict) or a 422 with a ``detail``; a bug a JSON 500."""

    @app.exception_handler(DupqError)
    async def user_error(request: Request, e: DupqError) -> JSONResponse:
        from dupq.collection import KeyConflict

        return JSONResponse({"detail": str(e)}, status_code=409 if isinstance(e, KeyConflict) else 400)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, e: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input, which may not even be encodable (NaN, "\ud800").
        errors = [{"type": err["type"], "loc": list(err["loc"]), "msg": err["msg"]} for err in e.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def bug(request: Request, e: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; the server log has the details."}, status_code=500)


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
        hits = await request.app.state.searches.submit((body.question, body.k))
        collection = request.app.state.collection
        return SearchResponse(question=body.question, threshold=collection.threshold, threshold_on=collection.model.threshold_on, results=hits)


def _add_write_route(app: FastAPI, authorised: Callable) -> None:
    """``POST /questions``, behind the bearer token."""

    @app.post("/questions", status_code=201, dependencies=[Depends(authorised)], responses=REFUSED | UNAUTHORISED | CONFLICT)
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
        return AddResponse(id=new_id, count=count)


def _add_status_routes(app: FastAPI, reads: list, responses: dict) -> None:
    """``GET /health`` and the web page at ``/``."""

    @app.get("/health", dependencies=reads, responses=responses)
    async def health(request: Request) -> Health:
        """The server is up: how many questions it holds and the duplicate threshold."""
        collection = request.app.state.collection
        return Health(status="ok", questions=len(collection), threshold=collection.threshold, threshold_on=collection.model.threshold_on)

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")


def _search(collection, items: list[tuple[str, int]]) -> list[list[HitOut]]:
    """One ``Collection.search`` for many ``(question, k)``: the largest ``k``, then each cut to its own."""
    hits = collection.search([q for q, _ in items], k=max(k for _, k in items))
    return [
        [HitOut(id=h.id, text=h.text, score=h.score, probability=h.probability, duplicate=h.duplicate, metadata=h.metadata) for h in row[:k]]
        for row, (_, k) in zip(hits, items)
    ]


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
) -> None:
    """Open the collection (a bad folder fails here, as one sentence) and serve it until stopped.

    ``threads`` is torch's thread count for encoding: with searches batched there is one
    encoding call at a time, and on a small machine the event loop needs the other core.
    """
    import torch
    import uvicorn

    if threads:
        torch.set_num_threads(threads)
    listener = listen(host, port)  # before anything is announced: a port in use fails here, as one sentence
    try:
        collection = open_collection(collection_dir, model_dir)
    except BaseException:
        listener.close()
        raise
    token = os.environ.get(TOKEN_ENV) or None
    log(
        f"serving {len(collection):,} questions from {collection_dir} on http://{host}:{port}/ "
        f"(writes {'need the bearer token' if token else f'disabled: set ${TOKEN_ENV}'})"
    )
    app = create_app(collection, token=token, protect_reads=protect_reads)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=5)).run(sockets=[listener])


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or a :class:`DupqError` saying why it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise DupqError(f"cannot listen on {host}:{port} ({e.strerror or e}); is another server using that port?") from None
    return sock

