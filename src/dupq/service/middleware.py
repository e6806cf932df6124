"""ASGI middleware of the service: body size, arrival time and nesting, JSON without NaN, security headers."""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi.responses import JSONResponse

from dupq.core.nesting import MAX_DEPTH, json_depth

log = logging.getLogger("dupq.service")

MAX_BODY = 64 * 1024  # bytes of one request body: a 1,000-character question plus metadata fits easily


BODY_TIMEOUT = 10.0  # seconds a request body may take to arrive: a slow client cannot hold a connection open


MAX_BODY_DEPTH = MAX_DEPTH + 1  # levels a JSON body may nest: the body object, then metadata's own MAX_DEPTH


SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class RequestGuard:
    """ASGI middleware in front of every route: the checks a body needs before any route reads it.

    A body is at most ``limit`` bytes (the declared ``Content-Length`` is checked first, then
    what actually arrives, so a chunked body cannot slip past; 413), arrives within ``timeout``
    seconds (408: a slow client cannot hold a connection), and, when it is JSON, nests at most
    :data:`MAX_BODY_DEPTH` levels (checked before parsing: ``[`` repeated 30,000 times would
    make the parser recurse past Python's limit) and holds neither ``NaN``/``Infinity`` (which
    Python's parser accepts but JSON does not) nor lone surrogates (``"\\ud800"``, not
    Unicode): all are refused with 422 here, once for every route.
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
                        return await _refuse(
                            scope, receive, send, 413, f"the request body is over {self.limit:,} bytes."
                        )
        except TimeoutError:
            return await _refuse(
                scope, receive, send, 408, f"the request body did not arrive within {self.timeout:g} seconds."
            )
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
    if json_depth(body, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
        return (
            f"the body nests objects and arrays more than {MAX_BODY_DEPTH} levels deep "
            f"(metadata may nest at most {MAX_DEPTH})."
        )
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
    """ASGI middleware, the outermost of the app's: every answer carries :data:`SECURITY_HEADERS`.

    Every answer: the page, the API, the refusals, and the JSON 500 of a bug, which is made here
    because Starlette's own last-resort handler sits outside every middleware (its 500 would
    carry no headers).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if started:  # half an answer is out: nothing to do but drop the connection
                raise
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            answer = JSONResponse({"detail": "internal error; the server log has the details."}, status_code=500)
            await answer(scope, receive, with_headers)


async def _refuse(scope, receive, send, status: int, detail) -> None:
    await JSONResponse({"detail": detail}, status_code=status, headers={"Connection": "close"})(scope, receive, send)
