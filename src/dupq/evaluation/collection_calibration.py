"""Refitting a collection's search calibration on its moderators' decisions (``dupq index calibrate DIR``).

Each decision :meth:`~dupq.collection.collection.Collection.decisions` gives is a labelled search hit
(:func:`~dupq.collection.calibration.decision_features`); :func:`calibrate_collection` fits
:func:`~dupq.evaluation.calibration.fit_search_calibration` on all of them and keeps the fit as the
collection's own (:meth:`~dupq.collection.collection.Collection.use_calibration`). What it is worth is
measured on held-out decisions: a fixed-seed :data:`HELD_OUT` share of each label is set aside, a second fit
on the rest judges them, and so does the calibration the collection used before; the report gives both.

Refused in one sentence with fewer than :data:`MIN_DECISIONS` decisions or fewer than :data:`MIN_EACH` of
either label: the fit has five weights and two thresholds, and the held-out part must hold both labels for
ROC-AUC to exist. Decisions that contradict each other (two questions judged duplicates of one canonical
question and distinct from each other, or one pair judged both ways) are counted and warned of, and fitted all
the same: they are what the moderators said.

>>> calibrate_collection(Collection.open("runs/desk"))["held_out"]["after"]["roc_auc"]  # doctest: +SKIP
0.93
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from dupq.collection.calibration import decision_features
from dupq.core.errors import DupqError
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.metrics import expected_calibration_error, threshold_free
from dupq.modeling.verdict import DUPLICATE, SUGGEST, for_search

if TYPE_CHECKING:
    from dupq.collection.collection import Collection

log = logging.getLogger(__name__)

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


def calibrate_collection(collection: Collection, seed: int = SEED) -> dict[str, Any]:
    """Fit the collection's search calibration on its decisions, keep it as the collection's own, and report
    ``{"decisions", "duplicates", "contradictions", "held_out": {"decisions", "seed", "before", "after"},
    "calibration": {"suggest", "duplicate"}, "fitted_on"}``."""
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
    collection.use_calibration(fit)
    return {
        "decisions": len(labels),
        "duplicates": int(labels.sum()),
        "contradictions": contradicting,
        "held_out": {"decisions": int(held.sum()), "seed": seed, "before": before, "after": after},
        "calibration": {"suggest": fit["suggest"], "duplicate": fit["duplicate"]},
        "fitted_on": fit["fitted_on"],
    }
