"""Refitting a collection's search calibration on its moderators' decisions (``dupq index calibrate DIR``).

Each decision is a labelled search hit (:func:`decision_features`);
:func:`calibrate_collection` fits :func:`~dupq.evaluation.calibration.fit_search_calibration` on all of
them and keeps it as the collection's own. What it is worth is measured on a fixed-seed
:data:`HELD_OUT` share of each label, judged by a fit on the rest and by the calibration used before.

Refused in one sentence below :data:`MIN_DECISIONS` decisions or :data:`MIN_EACH` of either label (the
held-out part must hold both for ROC-AUC), and when the refit judges the held-out decisions worse on
both counts (lower ROC-AUC, higher ECE) unless ``force``. Contradicting decisions are counted, warned
of and fitted all the same: they are what the moderators said. **Per scope** (``scope="category"``):
the decisions are grouped by that metadata field of the question judged against (the side a search
finds), and each value with enough decisions gets a fit of its own; the others keep the collection's.

>>> calibrate_collection(Collection.open("runs/desk"))["held_out"]["after"]["roc_auc"]  # doctest: +SKIP
0.93
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from dupq.collection.calibration import scope_value
from dupq.core.errors import DupqError
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.metrics import expected_calibration_error, threshold_free
from dupq.modeling.verdict import DUPLICATE, SUGGEST, clip_cosines, for_search, pair_logits, search_margins

if TYPE_CHECKING:
    from dupq.collection.collection import Collection

log = logging.getLogger(__name__)

HITS = 10  # the hits of a decision's search its margin is read from (as the yardstick's fitting: 10)

MIN_DECISIONS = 30  # fewer: five weights and two thresholds would swing with each decision
MIN_EACH = 5  # of each label: the held-out part needs both
HELD_OUT = 0.3  # the share of each label set aside to measure the fit
SEED = 0  # which decisions are held out
FITTED_BY = "dupq index calibrate DIR"


def check_enough(labels: np.ndarray) -> None:
    """Refuse in one sentence decisions too few to fit a calibration on."""
    duplicates = int(labels.sum())
    if len(labels) < MIN_DECISIONS or min(duplicates, len(labels) - duplicates) < MIN_EACH:
        raise DupqError(
            f"the collection holds {len(labels)} usable decisions ({duplicates} duplicates); a calibration needs at "
            f"least {MIN_DECISIONS}, with {MIN_EACH} of each verdict, so nothing was changed."
        )


def contradictions(decisions: list[tuple]) -> int:
    """How many distinct-decisions contradict the duplicate-decisions: the two questions judged distinct are in
    one group of duplicates (following ``duplicate_of`` either way), or the same pair was judged both ways."""
    parent: dict[str, str] = {}

    def root(k: str) -> str:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    for key, other, *_, y in decisions:
        if y == 1:
            parent[root(key)] = root(other)
    return sum(1 for key, other, *_, y in decisions if y == 0 and root(key) == root(other))


def held_out(labels: np.ndarray, seed: int = SEED) -> np.ndarray:
    """Which decisions ``(N,)`` are held out: :data:`HELD_OUT` of each label, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    out = np.zeros(len(labels), dtype=bool)
    for y in (0, 1):
        of = rng.permutation(np.flatnonzero(labels == y))
        out[of[: max(1, round(HELD_OUT * len(of)))]] = True
    return out


def judged_measures(collection: Collection, features: dict, calibration: dict | None) -> dict[str, Any]:
    """Accuracy (probability > 0.5), ROC-AUC and ECE of the pairs' probabilities judged with ``calibration``
    (None: the model's), and each tier's precision and recall: what a search would say of them."""
    judged = for_search(
        collection.model,
        features["cosines"],
        features["margins"],
        vectors=lambda: (features["u"], features["v"]),
        calibration=calibration,
    )
    y = features["labels"] == 1
    p = judged.probability if judged.probability is not None else judged.duplicate.astype(np.float64)
    out: dict[str, Any] = {
        "accuracy": round(float(np.mean((p > 0.5) == y)), 4),
        "roc_auc": threshold_free(p, features["labels"])["roc_auc"],
        "ece": round(expected_calibration_error(p, features["labels"]), 4),
    }
    for tier in (SUGGEST, DUPLICATE):
        flagged = np.isin(judged.tier, [DUPLICATE] if tier == DUPLICATE else [SUGGEST, DUPLICATE])
        right = int((flagged & y).sum())
        out[tier] = {
            "flagged": int(flagged.sum()),
            "precision": round(right / flagged.sum(), 4) if flagged.any() else None,
            "recall": round(right / y.sum(), 4) if y.any() else None,
        }
    if out["roc_auc"] is not None:
        out["roc_auc"] = round(out["roc_auc"], 4)
    return out


def _subset(features: dict, mask: np.ndarray) -> dict:
    return {name: values[mask] for name, values in features.items()}


def _fit(features: dict) -> dict[str, Any]:
    return fit_search_calibration(features["logits"], features["cosines"], features["margins"], features["labels"])


def enough(labels: np.ndarray) -> bool:
    """Whether ``labels`` are decisions enough to fit on (:func:`check_enough` does not refuse them)."""
    try:
        check_enough(labels)
    except DupqError:
        return False
    return True


def fit_scopes(collection: Collection, decisions: list[tuple], features: dict, field: str) -> tuple[dict, dict]:
    """A fit per value of the metadata ``field`` of the decisions' other questions that has decisions enough:
    ``{"field", "fits": {value: calibration}}``, and what is left to the collection's, ``{value: decisions}``."""
    values = {other: scope_value(collection.get(other)[2], field) for other in {o for _, o, *_ in decisions}}
    of = np.array([values[o] for _, o, *_ in decisions], dtype=object)  # (N,)
    fits, too_few = {}, {}
    for value in sorted({v for v in values.values() if v is not None}):
        mask = of == value
        labels = features["labels"][mask]
        if not enough(labels):
            too_few[value] = int(mask.sum())
            continue
        fit = _fit(_subset(features, mask))
        fit["fitted_on"] = dict(decisions=int(mask.sum()), duplicates=int(labels.sum()), tiers=fit.pop("tiers_on_fit"))
        fits[value] = fit
    return {"field": field, "fits": fits}, too_few


def check_better(before: dict, after: dict) -> None:
    """Refuse in one sentence a refit that judges the held-out decisions worse on both counts than the calibration in use."""
    if None in (before["roc_auc"], after["roc_auc"]):
        return
    if after["roc_auc"] < before["roc_auc"] and after["ece"] > before["ece"]:
        raise DupqError(
            f"the refit judges the held-out decisions worse than the calibration in use (ROC-AUC {before['roc_auc']} "
            f"-> {after['roc_auc']}, ECE {before['ece']} -> {after['ece']}), so nothing was changed; --force keeps it."
        )


def calibrate_collection(
    collection: Collection, seed: int = SEED, scope: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Fit the collection's search calibration on its decisions (and, with ``scope``, one per value of that
    metadata field with decisions enough), keep it as the collection's own, and report ``{"decisions",
    "duplicates", "contradictions", "held_out": {"decisions", "seed", "before", "after"}, "calibration":
    {"suggest", "duplicate"}, "fitted_on", "scopes"}`` (``scopes``: None, or ``{"field", "fitted": {value:
    {"decisions", "duplicates", "suggest", "duplicate"}}, "too_few": {value: decisions}}``)."""
    decisions = collection.decisions()
    labels = np.array([y for *_, y in decisions], dtype=np.int64)
    check_enough(labels)
    contradicting = contradictions(decisions)
    if contradicting:
        log.warning(
            "%d of the decisions of %s contradict others (judged distinct, yet duplicates of one question); "
            "they are fitted as they are.",
            contradicting,
            collection.location,
        )
    features = decision_features(collection, decisions)
    held = held_out(labels, seed)
    test = _subset(features, held)
    before = judged_measures(collection, test, collection.calibration)
    after = judged_measures(collection, test, _fit(_subset(features, ~held)))
    if not force:
        check_better(before, after)
    fit = _fit(features)
    fit["fitted_on"] = {
        "decisions": len(labels),
        "duplicates": int(labels.sum()),
        "contradictions": contradicting,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "tiers": fit.pop("tiers_on_fit"),
        "model_fingerprint": collection.model.fingerprint(),
    }
    fit["fitted_by"] = FITTED_BY
    scopes, too_few = fit_scopes(collection, decisions, features, scope) if scope else (None, {})
    if scopes is not None:
        fit["fitted_on"]["scope"] = scope
    collection.use_calibration(fit, scopes)
    shown = None
    if scopes is not None:
        fitted = {
            value: {**f["fitted_on"], "suggest": f["suggest"], "duplicate": f["duplicate"]}
            for value, f in scopes["fits"].items()
        }
        shown = {"field": scope, "fitted": fitted, "too_few": too_few}
    return {
        "decisions": len(labels),
        "duplicates": int(labels.sum()),
        "contradictions": contradicting,
        "held_out": {"decisions": int(held.sum()), "seed": seed, "before": before, "after": after},
        "calibration": {"suggest": fit["suggest"], "duplicate": fit["duplicate"]},
        "fitted_on": fit["fitted_on"],
        "scopes": shown,
    }


def decision_features(collection: Collection, decisions: list[tuple], hits: int = HITS) -> dict[str, Any]:
    """The features of each decision ``(key, other key, text, other text, label)`` as a search hit of the
    question's text: ``logits``, ``cosines``, ``margins``, ``labels`` ``(N,)`` and the pairs' vectors ``u``, ``v``
    ``(N, d)``. The search is the collection's (pending questions and the question itself left out)."""
    keys = list(dict.fromkeys(k for k, *_ in decisions))
    ids = {k: collection.get(k)[0] for k in {*keys, *(o for _, o, *_ in decisions)}}
    row = {k: n for n, k in enumerate(keys)}
    queries = collection.stored_vectors([ids[k] for k in keys])  # (Q, d) each question's own stored vector
    scores, found_ids = collection.nearest(queries, hits + 2)  # (Q, hits + 2) one more: the question itself
    own = found_ids == np.array([ids[k] for k in keys])[:, None]  # (Q, hits + 2)
    order = np.argsort(own, axis=1, kind="stable")[:, : hits + 1]  # (Q, hits + 1) the others, best first
    scores = clip_cosines(np.take_along_axis(np.where(own, -np.inf, scores), order, axis=1))
    found_ids = np.take_along_axis(np.where(own, -1, found_ids), order, axis=1)
    found = found_ids >= 0
    margins_of_hits = search_margins(np.where(found, scores, 0.0), found)  # (Q, hits + 1)
    u = queries[[row[k] for k, *_ in decisions]]  # (N, d)
    v = collection.stored_vectors([ids[o] for _, o, *_ in decisions])  # (N, d)
    cosines = clip_cosines(np.einsum("nd,nd->n", u, v).astype(np.float64))
    margins = []
    for (key, other, *_), cos in zip(decisions, cosines):
        q = row[key]
        shown = found_ids[q, :hits].tolist()
        margins.append(margins_of_hits[q, shown.index(ids[other])] if ids[other] in shown else cos - scores[q, 0])
    return {
        "logits": pair_logits(collection.model, u, v),
        "cosines": cosines,
        "margins": np.array(margins, dtype=np.float64),
        "labels": np.array([y for *_, y in decisions], dtype=np.int64),
        "u": u,
        "v": v,
    }
