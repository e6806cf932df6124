"""What the collection stores, read as a ticket system reads it: one question by key, a page of them, the decisions.

``GET /questions/{key}`` (404 for a key not stored), ``GET /questions`` (pages in id order, ``cursor`` the previous
page's ``next_cursor``, the search's filter written ``where=FIELD=VALUE``) and ``GET /decisions`` (the labelled pairs
``dupq index decisions`` writes). A pending question is listed like any other and says so, so a mirror of the listing
sees every question once (``where=pending=true`` lists only them).
"""

from __future__ import annotations

import functools
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request

from dupq.collection.backend import MAX_FIELDS, MAX_ID, hidden, where_from_text
from dupq.service.errors import UNKNOWN
from dupq.service.schemas import MAX_PAGE, Decision, Decisions, Key, QuestionPage, StoredQuestion, WhereItem

router = APIRouter()


@router.get("/questions")
async def list_questions(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Questions in the page (1 to 1,000).")] = 100,
    cursor: Annotated[
        int | None, Query(ge=0, le=MAX_ID, description="The next_cursor of the page before (none: the first page).")
    ] = None,
    where: Annotated[
        list[WhereItem] | None,
        Query(
            max_length=MAX_FIELDS,
            description="Only questions whose metadata match, as FIELD=VALUE (repeated: every field must match, "
            "a field twice: either value; a number or boolean matches as one too).",
        ),
    ] = None,
) -> QuestionPage:
    """A page of the stored questions in id order, those waiting in the review queue included (``pending``);
    follow ``next_cursor`` until it is null to see each once."""
    where_ = where_from_text([item.split("=", 1) for item in where]) if where else None
    page = functools.partial(request.app.state.collection.page, cursor, limit, where_)
    rows, after = await anyio.to_thread.run_sync(page)
    questions = [
        StoredQuestion(id=i, key=key, text=text, metadata=meta, pending=hidden(meta)) for i, key, text, meta in rows
    ]
    return QuestionPage(questions=questions, next_cursor=after)


@router.get("/questions/{key:path}", responses=UNKNOWN)
async def get_question(key: Key, request: Request) -> StoredQuestion:
    """The question stored under ``key``: its id, text and metadata (decisions on it included)."""
    i, text, metadata = await anyio.to_thread.run_sync(request.app.state.collection.get, key)
    return StoredQuestion(id=i, key=key, text=text, metadata=metadata, pending=hidden(metadata))


@router.get("/decisions")
async def decisions(request: Request) -> Decisions:
    """Every moderator's decision between two stored questions, as the labelled pairs ``dupq index decisions`` writes."""
    pairs = await anyio.to_thread.run_sync(request.app.state.collection.decisions)
    return Decisions(
        decisions=[
            Decision(key=key, other=other, text=text, other_text=other_text, duplicate=bool(label))
            for key, other, text, other_text, label in pairs
        ]
    )
