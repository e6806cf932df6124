"""The bearer token that guards writes (and, with ``protect_reads``, reads): checked at start, then per request.

The token is the app's (``app.state.token``, set by :func:`~dupq.service.app.create_app`), so one
dependency, :func:`authorised`, serves every router.
"""

from __future__ import annotations

import os
import secrets

from fastapi import Depends, Request
from fastapi.exceptions import HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dupq.core.errors import DupqError

TOKEN_ENV = "DUPQ_API_TOKEN"
bearer = HTTPBearer(auto_error=False, description=f"The server's ${TOKEN_ENV}.")


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


def authorised(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """Let a request through with the app's token as its bearer token (none: writes are disabled)."""
    token = request.app.state.token
    if token is None:
        raise HTTPException(403, f"writes are disabled: the server was started without ${TOKEN_ENV}.")
    given = credentials.credentials if credentials else ""
    if not secrets.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        detail = "this request needs the bearer token" if not given else "the bearer token is wrong"
        raise HTTPException(401, detail + ".", headers={"WWW-Authenticate": "Bearer"})
