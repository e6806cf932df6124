"""Fitting a model's calibration on dev pairs: the beta map's numbers and the decision threshold.

Beta calibration (Kull, Silva Filho & Flach 2017): :func:`fit_calibration` fits ``a, b, c`` of ``p = sigmoid(a ln s - b
ln(1 - s) + c)``, ``s = sigmoid(logit)``, on dev pairs; :func:`dupq.modeling.probability.calibrated` applies them;
:func:`threshold_record` chooses the threshold on dev scores. Pure NumPy: :func:`dupq.evaluation.evaluate.calibrate`
gives them a model's dev pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dupq.evaluation.metrics import best_threshold, check_scores, threshold_at_precision
from dupq.modeling.probability import beta_features, held_up, search_calibrated, search_features

SUGGEST_PRECISION = 0.5  # a search hit above the suggest tier is a duplicate at least as often as not
DUPLICATE_PRECISION = 0.95  # above the duplicate tier, 19 times in 20: safe to act on


def logistic_fit(features: np.ndarray, labels: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Weights ``w`` (last one the intercept) minimising log-loss of ``sigmoid(features @ w[:-1] + w[-1])``.

    Newton's method on a few parameters; a tiny ridge (1e-6 per pair) keeps it defined on separable data.
    """
    X = np.column_stack([features, np.ones(len(features))])  # (N, k + 1)
    w = np.zeros(X.shape[1])
    ridge = 1e-6 * len(X)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-np.clip(X @ w, -500, 500)))  # (N,)
        gradient = X.T @ (p - labels) + ridge * w
        hessian = (X * (p * (1 - p))[:, None]).T @ X + ridge * np.eye(X.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w


def fit_calibration(logits: np.ndarray, labels: np.ndarray, smooth: bool = False) -> dict[str, float]:
    """Beta calibration of pair logits: ``p = sigmoid(a ln s - b ln(1 - s) + c)`` with ``s = sigmoid(logit)``.

    Kull, Silva Filho & Flach 2017, *Beta calibration: a well-founded and easily implemented improvement on logistic
    calibration for binary classifiers*. It contains Platt scaling's family's shape at a = b and fits the asymmetric
    miscalibration of a pair head that Platt scaling cannot (the first labelled model: dev ECE 0.037 with Platt scaling,
    0.005 with this). A negative a or b would make the map non-monotone; then the fit is redone without that term, as
    the paper advises. Fit it on dev pairs; :func:`expected_calibration_error` checks it on test. ``smooth``: fit
    Platt's (1999) targets ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)`` in place of 1 and 0, so that a few separable
    pairs (a help desk's decisions) do not push every pair to 0 or 1.

    >>> fit = fit_calibration(np.array([-2.0, -1.0, 1.0, 2.0, 0.5, -0.5]), np.array([0, 0, 1, 1, 0, 1]))
    >>> fit["a"] >= 0 and fit["b"] >= 0
    True
    """
    z, y = check_scores(logits, labels)
    if smooth:
        positives = int(y.sum())
        y = np.where(y == 1, (positives + 1) / (positives + 2), 1 / (len(y) - positives + 2))
    features = beta_features(z)
    w = logistic_fit(features, y)
    if w[0] < 0 or w[1] < 0:  # keep the term that is positive, fit again with it alone
        keep = 0 if w[0] >= w[1] else 1
        one = logistic_fit(features[:, [keep]], y)
        w = np.zeros(3)
        w[keep], w[2] = max(one[0], 0.0), one[1]
    return {"method": "beta", "a": float(w[0]), "b": float(w[1]), "c": float(w[2])}


def fit_search_calibration(
    logits: np.ndarray, cosines: np.ndarray, margins: np.ndarray, labels: np.ndarray
) -> dict[str, Any]:
    """The search calibration of :func:`dupq.modeling.probability.search_calibrated` and its two tiers, fitted
    on search hits ``(N,)`` each: their pair logits, cosines, margins over the best other hit, and labels.

    The weights minimise log-loss (:func:`logistic_fit`); the tiers are the lowest probabilities above which the
    hits reach :data:`SUGGEST_PRECISION` and :data:`DUPLICATE_PRECISION` (:func:`threshold_at_precision`).
    """
    z, y = check_scores(logits, labels)
    margins = np.asarray(margins, dtype=np.float64)
    w = logistic_fit(search_features(z, cosines, margins), y)
    fit = {name: float(weight) for name, weight in zip(("a", "b", "cosine", "margin", "c"), w)}  # the intercept last
    fit["margin_range"] = [float(margins.min()), float(margins.max())]
    p = held_up(search_calibrated(fit, z, cosines, margins), cosines)  # as a search judges them
    suggest = threshold_at_precision(p, y, SUGGEST_PRECISION)
    duplicate = threshold_at_precision(p, y, DUPLICATE_PRECISION)
    return {
        **fit,
        "suggest": suggest["threshold"],
        "duplicate": duplicate["threshold"],
        "tiers_on_fit": {"suggest": suggest, "duplicate": duplicate},
    }


def threshold_record(scores: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The accuracy-maximising threshold on these (dev) scores, with the F1-maximising one beside it."""
    by_accuracy = best_threshold(scores, labels, "accuracy")
    by_f1 = best_threshold(scores, labels, "f1")
    return {
        "chosen_on": "dev pairs",
        "metric": "accuracy",
        "threshold": by_accuracy["threshold"],
        "dev_accuracy": by_accuracy["value"],
        "f1_threshold": by_f1["threshold"],
        "dev_f1_at_f1_threshold": by_f1["value"],
    }
