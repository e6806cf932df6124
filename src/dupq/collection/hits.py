"""A search's answer: :class:`Hit`, one stored question found, and the rules that make the hits of a query
from the index's ids, the stored rows and their verdicts (:func:`found_hits`, :func:`without_ids`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dupq.collection.rows import DUPLICATE_OF, read_metadata
from dupq.modeling.verdict import DUPLICATE, Verdicts


@dataclass
class Hit:
    """One stored question found by a search."""

    id: int  # the question's id in the collection
    key: str | None  # the caller's key for it (None: added without one)
    text: str
    score: float  # cosine similarity to the query
    duplicate: bool  # the model's verdict on (query, this question): in the duplicate tier (dupq.modeling.verdict)
    metadata: dict  # what was stored with it
    probability: float | None = None  # calibrated P(duplicate), where the model has a calibration
    duplicate_of: str | None = None  # the key of its canonical question, where a moderator marked it a duplicate
    ranked_by: str = "model"  # which model ordered and judged it: "model" (the collection's) or "reranker"
    tier: str | None = None  # "duplicate" (safe to act on), "suggest" (worth a look) or None: its probability's tier


def found_hits(
    scores: np.ndarray,
    ids: np.ndarray,
    probabilities: list,
    tiers: list,
    rows: dict,
    reranked: bool,
    warn: Callable[[int, str], None],
) -> list[Hit]:
    """One query's judged hits with their stored text and metadata (a row removed meanwhile is left out);
    ``reranked``: the reranker ordered and judged them; ``warn(id, sentence)`` hears of a damaged row."""
    hits, by = [], "reranker" if reranked else "model"
    for score, i, p, tier in zip(scores.tolist(), ids.tolist(), probabilities, tiers):
        if i not in rows:
            continue
        key, text, stored = rows[i]
        if not isinstance(text, str):  # not UTF-8, or not text at all: written by something else
            warn(i, f"the text of question {i} is damaged ({type(text).__name__}, not text); it is left out")
            continue
        metadata, damage = read_metadata(stored)
        if damage:
            warn(i, f"the metadata of question {i} is damaged and left out: {damage}")
        key = key if isinstance(key, str) else None
        canonical = metadata.get(DUPLICATE_OF)
        canonical = canonical if isinstance(canonical, str) else None
        hits.append(
            Hit(
                id=i,
                key=key,
                text=text,
                score=score,
                duplicate=tier == DUPLICATE,
                metadata=metadata,
                probability=p,
                tier=tier,
                duplicate_of=canonical,
                ranked_by=by,
            )
        )
    return hits


def hits_of_queries(
    per_query: np.ndarray,
    scores: np.ndarray,
    ids: np.ndarray,
    judged: Verdicts,
    rows: dict,
    reranked: bool,
    warn: Callable[[int, str], None],
) -> list[list[Hit]]:
    """Each query's :func:`found_hits` from every query's hits ``(H,)`` in a row, query after query, and their
    verdicts; ``per_query`` ``(Q,)``: how many hits each query has."""
    probabilities = [None] * len(ids) if judged.probability is None else judged.probability.tolist()
    tiers = judged.tier.tolist()
    bounds = np.concatenate([[0], np.cumsum(per_query)]).tolist()
    return [
        found_hits(scores[a:b], ids[a:b], probabilities[a:b], tiers[a:b], rows, reranked, warn)
        for a, b in zip(bounds, bounds[1:])
    ]


def without_removed_canonicals(hits: list[list[Hit]], find: Callable[[list[str]], dict]) -> list[list[Hit]]:
    """``hits`` with ``duplicate_of`` cleared where that canonical question was removed since (``find(keys)``: the
    stored ones among ``keys``): a question removed is no one's canonical question any more."""
    canonical = {h.duplicate_of for row in hits for h in row if h.duplicate_of is not None}
    if canonical:
        stored = find(sorted(canonical))
        for h in (h for row in hits for h in row if h.duplicate_of is not None and h.duplicate_of not in stored):
            h.duplicate_of = None
    return hits


def without_ids(scores: np.ndarray, ids: np.ndarray, left_out: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Searches ``(Q, K)`` with the hits of ``left_out`` taken out, the rest moved up in order (padded with -1).

    >>> without_ids(np.array([[0.9, 0.8, 0.7]]), np.array([[4, 5, 6]]), [5])[1].tolist()
    [[4, 6, -1]]
    """
    keep = ~np.isin(ids, left_out)  # (Q, K)
    order = np.argsort(~keep, axis=1, kind="stable")  # (Q, K) the kept hits first, in their order
    scores = np.where(keep, scores, -np.inf)
    ids = np.where(keep, ids, -1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)
