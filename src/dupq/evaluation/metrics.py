"""Metrics of judged pairs: pure functions of numpy arrays, checked against scikit-learn in the tests.

The seed scores a test pair by the cosine ``d`` of its two vectors, calls it a duplicate when
``d > threshold`` (0.7 there) and reports accuracy and the confusion matrix, rows = true label,
columns = predicted::

    [[TN, FP],
     [FN, TP]]          the seed's model: [[4872, 1510], [1309, 2549]], accuracy 0.7247

Every function takes ``scores (N,)`` and ``labels (N,)`` 0/1 and knows no model and no file. :func:`best_threshold`
chooses on whatever pairs it is given (the caller gives it dev pairs, never the reported ones). ROC-AUC and average
precision follow scikit-learn's definitions exactly, ties included: the curves have one point per *distinct* score.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.modeling.verdict import above

METRICS = ("accuracy", "f1")  # what best_threshold can maximise


def check_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, labels)`` as flat float64 and int64 arrays, or a one-sentence error on a bad input."""
    scores = np.asarray(scores, dtype=np.float64).ravel()  # (N,)
    labels = np.asarray(labels).ravel()  # (N,)
    if scores.shape != labels.shape:
        raise DupqError(f"scores and labels differ in length ({len(scores)} and {len(labels)}).")
    if not len(scores):
        raise DupqError("there are no pairs to score.")
    if not np.isin(labels, (0, 1)).all():
        raise DupqError("labels must be 0 (different) or 1 (duplicate).")
    if not np.isfinite(scores).all():
        raise DupqError("scores must be finite numbers.")
    return scores, labels.astype(np.int64)


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 0.0  # scikit-learn's zero_division=0


def binary_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Accuracy, precision, recall, F1 and the confusion matrix of ``score > threshold``.

    ``confusion_matrix`` is ``[[TN, FP], [FN, TP]]`` (rows true 0/1, columns predicted 0/1, as the seed's
    ``tf.math.confusion_matrix``). Precision/recall/F1 treat duplicates as positive and are 0 when undefined (no
    predicted or no true duplicates), as scikit-learn's ``zero_division=0``.

    >>> binary_metrics(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 0]), 0.7)["confusion_matrix"]
    [[1, 1], [0, 1]]
    """
    scores, labels = check_scores(scores, labels)
    predicted = above(scores, threshold)  # (N,) bool, the seed's `d > threshold`
    truth = labels == 1  # (N,) bool
    tp = int(np.sum(predicted & truth))
    fp = int(np.sum(predicted & ~truth))
    fn = int(np.sum(~predicted & truth))
    tn = len(scores) - tp - fp - fn
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "threshold": float(threshold),
        "accuracy": (tp + tn) / len(scores),
        "precision": precision,
        "recall": recall,
        "f1": _ratio(2 * tp, 2 * tp + fp + fn),
        "confusion_matrix": [[tn, fp], [fn, tp]],
    }


def _cumulative(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """True and false positives when everything scoring ``>= t`` is called a duplicate.

    One entry per distinct score ``t``, highest first (scikit-learn's ``_binary_clf_curve``):
    returns ``(tps, fps, t)``, each ``(K,)``.
    """
    order = np.argsort(-scores, kind="stable")  # (N,) highest first
    s, y = scores[order], labels[order]  # (N,), (N,)
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # (K,) last index of each run of equal scores
    tps = np.cumsum(y)[last]  # (K,)
    fps = last + 1 - tps  # (K,)
    return tps, fps, s[last]


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)`` of the ROC curve, starting at (0, 0); ``(K + 1,)`` each.

    The point k is for calling ``score >= thresholds[k]`` a duplicate; thresholds[0] is +inf. Needs both labels present.
    """
    scores, labels = check_scores(scores, labels)
    tps, fps, t = _cumulative(scores, labels)
    if not tps[-1] or not fps[-1]:
        raise DupqError("a ROC curve needs both duplicate and non-duplicate pairs.")
    return np.r_[0.0, fps / fps[-1]], np.r_[0.0, tps / tps[-1]], np.r_[np.inf, t]


def precision_recall_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(precision, recall, thresholds)`` with one point per distinct score, highest first, ``(K,)``."""
    scores, labels = check_scores(scores, labels)
    tps, fps, t = _cumulative(scores, labels)
    if not tps[-1]:
        raise DupqError("a precision-recall curve needs duplicate pairs.")
    return tps / (tps + fps), tps / tps[-1], t


def threshold_free(scores: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """ROC-AUC and average precision of the scores, as scikit-learn computes them.

    ``roc_auc`` is the trapezoidal area under the ROC curve: the chance that a random duplicate scores above a random
    non-duplicate, ties counting half. ``average_precision`` is ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct
    scores, highest first (no interpolation). Both are None when one of the labels is absent (undefined).

    >>> threshold_free(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 0]))
    {'roc_auc': 1.0, 'average_precision': 1.0}
    """
    scores, labels = check_scores(scores, labels)
    tps, fps, _ = _cumulative(scores, labels)
    positives, negatives = tps[-1], fps[-1]
    if not positives or not negatives:
        return {"roc_auc": None, "average_precision": None}
    fpr = np.r_[0.0, fps / negatives]  # (K + 1,)
    tpr = np.r_[0.0, tps / positives]  # (K + 1,)
    roc_auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    precision = tps / (tps + fps)  # (K,)
    recall = tpr  # (K + 1,) recall before each point, starting at 0
    average_precision = float(np.sum(np.diff(recall) * precision))
    return {"roc_auc": roc_auc, "average_precision": average_precision}


def best_threshold(scores: np.ndarray, labels: np.ndarray, metric: str = "accuracy") -> dict[str, Any]:
    """The threshold ``t`` whose ``score > t`` maximises ``metric`` ("accuracy" or "f1"), exactly.

    Only the set of pairs above ``t`` matters, so the candidates are one cut between each two neighbouring distinct
    scores (their midpoint, so a new pair scoring in between is not decided by a hair), plus "all duplicates" and
    "none". The counts for every cut come from one cumulative sum over the sorted scores: O(N log N), no loop over
    thresholds. Ties between cuts go to the highest threshold.

    >>> best_threshold(np.array([0.9, 0.8, 0.3]), np.array([1, 1, 0]))
    {'metric': 'accuracy', 'threshold': 0.55, 'value': 1.0}
    """
    if metric not in METRICS:
        raise DupqError(f"the metric must be one of {', '.join(METRICS)}, not {metric!r}.")
    scores, labels = check_scores(scores, labels)
    thresholds, tps, fps = _cuts(scores, labels)
    positives, n = int(tps[-1]), len(scores)
    if metric == "accuracy":
        values = (tps + (n - positives) - fps) / n  # (K + 1,) (TP + TN) / N
    else:
        denominator = tps + fps + positives  # 2TP + FP + FN
        values = np.divide(2 * tps, denominator, out=np.zeros(len(tps)), where=denominator > 0)
    best = int(np.argmax(values))
    return {"metric": metric, "threshold": float(thresholds[best]), "value": float(values[best])}


def _cuts(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every distinct verdict of ``score > t``: the thresholds ``(K + 1,)``, highest first (the first calls
    nobody a duplicate; each other lies midway between two neighbouring distinct scores, or on the lower
    one where they are adjacent floats), and the true and false positives ``(K + 1,)`` above each."""
    tps, fps, distinct = _cumulative(scores, labels)  # (K,) each; cut k calls distinct[: k + 1] duplicates
    lower = np.r_[distinct[1:], np.nextafter(distinct[-1], -np.inf)]  # (K,) the score below each cut
    cuts = (distinct + lower) / 2  # (K,)
    cuts = np.where((cuts >= distinct) | (cuts < lower), lower, cuts)  # adjacent floats: keep `score > t` exact
    return np.r_[distinct[0], cuts], np.r_[0, tps], np.r_[0, fps]


def threshold_at_precision(scores: np.ndarray, labels: np.ndarray, precision: float) -> dict[str, Any]:
    """The lowest threshold ``t`` whose ``score > t`` has at least ``precision`` (the most recall at that
    precision), exactly, among the cuts of :func:`best_threshold`; the highest score (nobody) when none has.

    >>> threshold_at_precision(np.array([0.9, 0.8, 0.7, 0.3]), np.array([1, 1, 0, 1]), 0.95)
    {'threshold': 0.75, 'precision': 1.0, 'recall': 0.6666666666666666}
    """
    scores, labels = check_scores(scores, labels)
    thresholds, tps, fps = _cuts(scores, labels)
    flagged = tps + fps  # (K + 1,)
    reached = np.divide(tps, flagged, out=np.zeros(len(tps)), where=flagged > 0) >= precision
    reached[0] = False  # calling nobody a duplicate reaches no precision
    best = int(np.flatnonzero(reached)[-1]) if reached.any() else 0
    positives = max(int(tps[-1]), 1)
    return {
        "threshold": float(thresholds[best]),
        "precision": float(tps[best] / flagged[best]) if flagged[best] else None,
        "recall": float(tps[best] / positives),
    }


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """ECE over ``bins`` equal-width bins of [0, 1]: ``sum_b n_b / N * |mean(y in b) - mean(p in b)|``.

    Naeini, Cooper & Hauskrecht 2015; Guo et al. 2017, *On Calibration of Modern Neural Networks*.
    A probability of exactly 1 falls in the last bin.

    >>> expected_calibration_error(np.array([0.2, 0.2, 0.9, 0.9]), np.array([0, 1, 1, 1]))
    0.2
    """
    p, y = check_scores(probabilities, labels)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)  # (N,) bin of each pair
    counts = np.bincount(which, minlength=bins)
    gap = np.abs(np.bincount(which, y, bins) - np.bincount(which, p, bins))  # (bins,) |sum y - sum p|
    return float(round(gap.sum() / len(p), 12)) if counts.sum() else 0.0


def reliability(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> dict[str, list[float]]:
    """Per bin of [0, 1]: pairs, mean predicted probability and the share that are duplicates (a reliability diagram)."""
    p, y = check_scores(probabilities, labels)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    counts = np.bincount(which, minlength=bins)
    safe = np.maximum(counts, 1)
    return {
        "pairs": counts.tolist(),
        "mean_probability": (np.bincount(which, p, bins) / safe).tolist(),
        "duplicate_share": (np.bincount(which, y, bins) / safe).tolist(),
    }
