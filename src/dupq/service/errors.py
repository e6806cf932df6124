"""How a refusal or a failure becomes an HTTP answer: the statuses the routes document and the app's error handlers.

:func:`answer_to` is the one place where a library error (:class:`~dupq.core.errors.DupqError`,
a store's :class:`~dupq.collection.rows.StoreFailure` among them) becomes a status and a sentence.
"""

from __future__ import annotations

import errno
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from dupq.collection.rows import KeyConflict, StoreFailure, UnknownKey
from dupq.core.errors import DupqError

log = logging.getLogger(__name__)

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
DECISION_CONFLICT = {
    409: {
        "description": "The decision would make a cycle of canonical questions, judges a question against itself, "
        "or contradicts an earlier decision (send it with change: true to replace that one)."
    }
}


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


def add_error_handlers(app: FastAPI) -> None:
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
