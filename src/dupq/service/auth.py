"""The bearer tokens: the write token guards writes; reads, when protected, take the read token or the write token.

The write token is ``$DUPQ_API_TOKEN`` (or ``create_app``'s ``token``); the read token, ``$DUPQ_READ_TOKEN`` (or
``read_token``), lets a reader (a dashboard, Prometheus) search, judge, check ``/health`` and scrape ``/metrics``
without writing, and setting it protects the reads. Both are checked at start by one rule (:func:`check_token`) and kept
on the app, so two dependencies, :func:`authorised` (writes) and :func:`reader` (reads), serve every router.
"""

from __future__ import annotations

import os
import secrets

from fastapi import Depends, Request
from fastapi.exceptions import HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dupq.core.errors import DupqError

TOKEN_ENV = "DUPQ_API_TOKEN"
READ_TOKEN_ENV = "DUPQ_READ_TOKEN"
bearer = HTTPBearer(auto_error=False, description=f"The server's ${TOKEN_ENV} (a read: or ${READ_TOKEN_ENV}).")


def write_token(token: str | None = None) -> str | None:
    """The bearer token that guards writes: ``token``, else ``$DUPQ_API_TOKEN``; None (writes disabled) when neither is set.

    A token that would let anyone write, or that no client can send, is refused at start in one
    sentence: an empty or blank one, one with blanks at its ends (HTTP drops them from a header) and
    one that is not Latin-1 (a header's bytes).
    """
    where = "the token" if token is not None else f"${TOKEN_ENV}"
    return check_token(token if token is not None else os.environ.get(TOKEN_ENV), where, "write")


def read_token(token: str | None = None, write: str | None = None) -> str | None:
    """The bearer token that lets a request read (not write): ``token``, else ``$DUPQ_READ_TOKEN``; None when neither is set.

    It follows the write token's rule (:func:`check_token`), and may not be the write token
    ``write``, which would let every reader write.
    """
    where = "the read token" if token is not None else f"${READ_TOKEN_ENV}"
    token = check_token(token if token is not None else os.environ.get(READ_TOKEN_ENV), where, "read")
    if token is not None and token == write:
        raise DupqError(f"{where} is the write token, which would let every reader write; give readers another one.")
    return token


def check_token(token: str | None, where: str, what: str) -> str | None:
    """``token`` if a client can send it and it guards something (None stays None), else a one-sentence DupqError."""
    if token is None:
        return None
    if not isinstance(token, str) or not token.strip():
        raise DupqError(
            f"{where} is empty or blank, which would let anyone {what}; give a real token, or none to disable "
            + ("writes." if what == "write" else "the read token.")
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


def authorised(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """Let a write through with the app's write token as its bearer token (none: writes are disabled)."""
    token = request.app.state.token
    if token is None:
        raise HTTPException(403, f"writes are disabled: the server was started without ${TOKEN_ENV}.")
    _check(credentials, [token])


def reader(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """Let a protected read through with the app's read token or its write token as its bearer token
    (without a read token, as :func:`authorised` does)."""
    state = request.app.state
    if state.read_token is None:
        return authorised(request, credentials)
    _check(credentials, [t for t in (state.read_token, state.token) if t is not None])


def _check(credentials: HTTPAuthorizationCredentials | None, tokens: list[str]) -> None:
    given = (credentials.credentials if credentials else "").encode("utf-8")
    # every token compared, in constant time each: how long the check takes says nothing about which one matched
    if not sum(secrets.compare_digest(given, token.encode("utf-8")) for token in tokens):
        detail = "this request needs the bearer token" if not given else "the bearer token is wrong"
        raise HTTPException(401, detail + ".", headers={"WWW-Authenticate": "Bearer"})
