"""Judging pairs: metrics at a threshold, threshold-free metrics, and threshold calibration.

The seed (002, part 4 "classify") scores a test pair by the cosine similarity ``d`` of its two
question vectors, calls it a duplicate when ``d > threshold`` (0.7 there) and reports accuracy
and the confusion matrix with rows = true label 0/1 and columns = predicted 0/1:

    [[TN, FP],
     [FN, TP]]          the seed's model: [[4872, 1510], [1309, 2549]], accuracy 0.7247

Everything here is a pure function of numpy arrays (``scores`` (N,) floats, ``labels`` (N,)
0/1) except :func:`evaluate` and :func:`calibrate`, which first ask a model for the scores.

The threshold is chosen on the **dev** pairs (:func:`calibrate`) and only *reported* on the
test pairs (:func:`evaluate`): choosing it where it is reported would flatter the model
(sentence-transformers' ``BinaryClassificationEvaluator`` does that; this module does not).

ROC-AUC and average precision follow scikit-learn's definitions exactly, tied scores included:
the curves have one point per *distinct* score, so pairs with equal scores move together.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dupq.data import Pairs, SplitConfig, Splits, read_pairs, split_pairs
from dupq.files import DupqError, read_json
from dupq.model import SEED_THRESHOLD, Model, beta_features, calibrated

METRICS = ("accuracy", "f1")  # what best_threshold can maximise
PRIMARY = "accuracy"  # the seeds' headline figure


def _check(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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

    ``confusion_matrix`` is ``[[TN, FP], [FN, TP]]`` (rows true 0/1, columns predicted 0/1, as
    the seed's ``tf.math.confusion_matrix``). Precision/recall/F1 treat duplicates as positive
    and are 0 when undefined (no predicted or no true duplicates), as scikit-learn's
    ``zero_division=0``.

    >>> binary_metrics(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 0]), 0.7)["confusion_matrix"]
    [[1, 1], [0, 1]]
    """
    scores, labels = _check(scores, labels)
    predicted = scores > threshold  # (N,) bool, the seed's `d > threshold`
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

    The point k is for calling ``score >= thresholds[k]`` a duplicate; thresholds[0] is +inf.
    Needs both labels present.
    """
    scores, labels = _check(scores, labels)
    tps, fps, t = _cumulative(scores, labels)
    if not tps[-1] or not fps[-1]:
        raise DupqError("a ROC curve needs both duplicate and non-duplicate pairs.")
    return np.r_[0.0, fps / fps[-1]], np.r_[0.0, tps / tps[-1]], np.r_[np.inf, t]


def precision_recall_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(precision, recall, thresholds)`` with one point per distinct score, highest first, ``(K,)``."""
    scores, labels = _check(scores, labels)
    tps, fps, t = _cumulative(scores, labels)
    if not tps[-1]:
        raise DupqError("a precision-recall curve needs duplicate pairs.")
    return tps / (tps + fps), tps / tps[-1], t


def threshold_free(scores: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """ROC-AUC and average precision of the scores, as scikit-learn computes them.

    ``roc_auc`` is the trapezoidal area under the ROC curve: the chance that a random duplicate
    scores above a random non-duplicate, ties counting half. ``average_precision`` is
    ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct scores, highest first (no
    interpolation). Both are None when one of the labels is absent (undefined).

    >>> threshold_free(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 0]))
    {'roc_auc': 1.0, 'average_precision': 1.0}
    """
    scores, labels = _check(scores, labels)
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

    Only the set of pairs above ``t`` matters, so the candidates are one cut between each two
    neighbouring distinct scores (their midpoint, so a new pair scoring in between is not
    decided by a hair), plus "all duplicates" and "none". The counts for every cut come from
    one cumulative sum over the sorted scores: O(N log N), no loop over thresholds. Ties
    between cuts go to the highest threshold.

    >>> best_threshold(np.array([0.9, 0.8, 0.3]), np.array([1, 1, 0]))
    {'metric': 'accuracy', 'threshold': 0.55, 'value': 1.0}
    """
    if metric not in METRICS:
        raise DupqError(f"the metric must be one of {', '.join(METRICS)}, not {metric!r}.")
    scores, labels = _check(scores, labels)
    tps, fps, distinct = _cumulative(scores, labels)  # (K,) each; cut k calls distinct[: k + 1] duplicates
    tps, fps = np.r_[0, tps], np.r_[0, fps]  # (K + 1,): cut 0 calls nothing a duplicate
    lower = np.r_[distinct[1:], np.nextafter(distinct[-1], -np.inf)]  # (K,) the score below each cut
    cuts = (distinct + lower) / 2  # (K,)
    cuts = np.where((cuts >= distinct) | (cuts < lower), lower, cuts)  # adjacent floats: keep `score > t` exact
    thresholds = np.r_[distinct[0], cuts]  # (K + 1,): `score > distinct[0]` is nobody
    positives, n = int(tps[-1]), len(scores)
    if metric == "accuracy":
        values = (tps + (n - positives) - fps) / n  # (K + 1,) (TP + TN) / N
    else:
        denominator = tps + fps + positives  # 2TP + FP + FN
        values = np.divide(2 * tps, denominator, out=np.zeros(len(tps)), where=denominator > 0)
    best = int(np.argmax(values))
    return {"metric": metric, "threshold": float(thresholds[best]), "value": float(values[best])}


def _logistic_fit(features: np.ndarray, labels: np.ndarray, iterations: int = 100) -> np.ndarray:
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


def fit_calibration(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Beta calibration of pair logits: ``p = sigmoid(a ln s - b ln(1 - s) + c)`` with ``s = sigmoid(logit)``.

    Kull, Silva Filho & Flach 2017, *Beta calibration: a well-founded and easily implemented
    improvement on logistic calibration for binary classifiers*. It contains Platt scaling's
    family's shape at a = b and fits the asymmetric miscalibration of a pair head that Platt
    scaling cannot (the first labelled model: dev ECE 0.037 with Platt scaling, 0.005 with this). A
    negative a or b would make the map non-monotone; then the fit is redone without that term,
    as the paper advises. Fit it on dev pairs; :func:`expected_calibration_error` checks it on test.

    >>> fit = fit_calibration(np.array([-2.0, -1.0, 1.0, 2.0, 0.5, -0.5]), np.array([0, 0, 1, 1, 0, 1]))
    >>> fit["a"] >= 0 and fit["b"] >= 0
    True
    """
    z, y = _check(logits, labels)
    features = beta_features(z)
    w = _logistic_fit(features, y)
    if w[0] < 0 or w[1] < 0:  # keep the term that is positive, fit again with it alone
        keep = 0 if w[0] >= w[1] else 1
        one = _logistic_fit(features[:, [keep]], y)
        w = np.zeros(3)
        w[keep], w[2] = max(one[0], 0.0), one[1]
    return {"method": "beta", "a": float(w[0]), "b": float(w[1]), "c": float(w[2])}


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """ECE over ``bins`` equal-width bins of [0, 1]: ``sum_b n_b / N * |mean(y in b) - mean(p in b)|``.

    Naeini, Cooper & Hauskrecht 2015; Guo et al. 2017, *On Calibration of Modern Neural Networks*.
    A probability of exactly 1 falls in the last bin.

    >>> expected_calibration_error(np.array([0.2, 0.2, 0.9, 0.9]), np.array([0, 1, 1, 1]))
    0.2
    """
    p, y = _check(probabilities, labels)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)  # (N,) bin of each pair
    counts = np.bincount(which, minlength=bins)
    gap = np.abs(np.bincount(which, y, bins) - np.bincount(which, p, bins))  # (bins,) |sum y - sum p|
    return float(round(gap.sum() / len(p), 12)) if counts.sum() else 0.0


def reliability(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> dict[str, list[float]]:
    """Per bin of [0, 1]: pairs, mean predicted probability and the share that are duplicates (a reliability diagram)."""
    p, y = _check(probabilities, labels)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    counts = np.bincount(which, minlength=bins)
    safe = np.maximum(counts, 1)
    return {
        "pairs": counts.tolist(),
        "mean_probability": (np.bincount(which, p, bins) / safe).tolist(),
        "duplicate_share": (np.bincount(which, y, bins) / safe).tolist(),
    }


# Questions per LSTM batch when judging. On this project's 2-core CPU, encoding 32,768 questions
# took 1.4 s at 128 and 2.1 s at 1,024 (Model.encode's default), with peak memory 350 vs 800 MiB:
# a batch of long questions pads to (batch, 256 tokens, 4 * dim) gate activations.
ENCODE_BATCH = 128


def pair_scores(model: Model, pairs: Pairs, chunk: int = 8192, kind: str = "score") -> np.ndarray:
    """Every pair's ``(N,)`` score, encoded chunk by chunk: what the model's threshold applies to
    (``kind="score"``), its uncalibrated logit (``"logit"``) or its cosine (``"similarity"``)."""
    out = np.empty(len(pairs), dtype=np.float64)
    for start in range(0, len(pairs), chunk):
        stop = start + chunk
        q1, q2 = pairs.q1[start:stop], pairs.q2[start:stop]
        v = model.encode([*q1, *q2], batch_size=ENCODE_BATCH)  # (2n, d)
        u, w = v[: len(q1)], v[len(q1) :]
        if kind == "similarity":
            out[start:stop] = np.einsum("nd,nd->n", u, w)
        elif kind == "logit":
            out[start:stop] = model.logits_from_vectors(u, w)
        else:
            out[start:stop] = model.scores_from_vectors(u, w)
    return out


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def evaluate_scores(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """:func:`evaluate` on scores already computed: one plain dict of metrics (see there)."""
    metrics = binary_metrics(scores, labels, threshold)
    return {
        "primary_metric": PRIMARY,
        **metrics,
        **{k: _finite(v) for k, v in threshold_free(scores, labels).items()},
        "accuracy_at_0_7": binary_metrics(scores, labels, SEED_THRESHOLD)["accuracy"],
        "pairs": len(labels),
        "duplicates": int(np.sum(labels)),
    }


def evaluate(model: Model, pairs: Pairs, threshold: float | None = None) -> dict[str, Any]:
    """Score ``pairs`` with ``model`` and report every metric, at ``threshold`` (default: the model's).

    Returns a plain dict: ``primary_metric`` ("accuracy"), ``threshold``, ``accuracy``,
    ``precision``, ``recall``, ``f1``, ``confusion_matrix`` (``[[TN, FP], [FN, TP]]``),
    ``roc_auc``, ``average_precision``, ``accuracy_at_0_7`` (the seeds' fixed threshold, for
    comparison with their ~0.725), ``pairs``, ``duplicates`` and ``threshold_chosen_on``.

    >>> evaluate(Model.load("runs/model"), splits.test)["accuracy"]   # doctest: +SKIP
    0.74
    """
    if not len(pairs):
        raise DupqError("there are no pairs to evaluate on.")
    given = threshold is not None
    threshold = float(threshold) if given else model.threshold
    logits = pair_scores(model, pairs, kind="logit")
    scores = scores_from_logits(model, logits, pairs)
    result = evaluate_scores(scores, pairs.labels, threshold)
    result["threshold_on"] = model.threshold_on
    result["threshold_chosen_on"] = "given" if given else model.threshold_info.get("chosen_on", "unknown")
    if model.calibration is not None or model.head is not None:
        probabilities = probabilities_from_logits(model, logits)
        result["expected_calibration_error"] = expected_calibration_error(probabilities, pairs.labels)
        result["reliability"] = reliability(probabilities, pairs.labels)
    return result


def probabilities_from_logits(model: Model, logits: np.ndarray) -> np.ndarray:
    return calibrated(model.calibration, logits)


def scores_from_logits(model: Model, logits: np.ndarray, pairs: Pairs) -> np.ndarray:
    """The judged scores (see :meth:`Model.scores_from_vectors`) from already computed logits."""
    if model.threshold_on == "probability":
        return probabilities_from_logits(model, logits)
    if model.head is None:
        return np.clip(logits, -1.0, 1.0)  # without a head the logit is the cosine
    if not model.needs_vectors:  # a cosine head's logit is scale * (cos - bias): invert it, no second encoding
        return np.clip(logits / model.head.scale.item() + model.head.bias.item(), -1.0, 1.0)
    return pair_scores(model, pairs, kind="similarity")


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


def calibrate(model: Model, dev_pairs: Pairs) -> dict[str, Any]:
    """Choose the model's threshold on the **dev** pairs: the one maximising accuracy.

    The F1-maximising threshold is found too and kept for reference (a user who cares more
    about finding every duplicate than about being right overall may prefer it). Sets
    ``model.threshold`` and ``model.threshold_info`` (saved in ``config.json`` by
    ``model.save``) and returns the calibration record. Never pass test pairs here.
    """
    if not len(dev_pairs):
        raise DupqError("there are no dev pairs to calibrate the threshold on; give the split a dev part.")
    logits = pair_scores(model, dev_pairs, kind="logit")
    if 0 < dev_pairs.labels.sum() < len(dev_pairs):
        model.calibration = fit_calibration(logits, dev_pairs.labels)
    scores = scores_from_logits(model, logits, dev_pairs)
    record = {
        **threshold_record(scores, dev_pairs.labels),
        "dev_accuracy_at_0_7": binary_metrics(scores, dev_pairs.labels, SEED_THRESHOLD)["accuracy"],
        "threshold_on": model.threshold_on,
        "probability_calibration": model.calibration,
        "dev_pairs": len(dev_pairs),
        "dev_rows": [int(dev_pairs.rows.min()), int(dev_pairs.rows.max())],
        "model_fingerprint": model.fingerprint(),
    }
    model.threshold = record["threshold"]
    model.threshold_info = record
    return record


def calibrate_and_test(model: Model, dev: Pairs, test: Pairs) -> dict[str, Any]:
    """Calibrate on ``dev``, then evaluate on ``test`` at that threshold; both go into ``model.metrics``.

    The caller saves the model (``model.save``) to store the threshold and the metrics.
    """
    calibration = calibrate(model, dev)
    test_metrics = evaluate(model, test)
    test_metrics["test_rows"] = [int(test.rows.min()), int(test.rows.max())]
    model.metrics = {**model.metrics, "calibration": calibration, "test": test_metrics}
    return {"calibration": calibration, "test": test_metrics}


def model_split(model: Model) -> SplitConfig:
    """The split the model was trained with (recorded by ``dupq train``), else the seed split."""
    recorded = model.metrics.get("training", {}).get("split")
    if not isinstance(recorded, dict):
        return SplitConfig()
    try:
        return SplitConfig(**recorded)
    except TypeError:
        raise DupqError(f"the model's metrics record an unknown split {recorded}.") from None


def held_out(model: Model, data: str | Path) -> Splits:
    """Read ``data`` and cut it as the model was trained: its test and dev pairs are unseen."""
    pairs, _ = read_pairs(data)
    return split_pairs(pairs, model_split(model))


def save_calibrated(model: Model, folder: str | Path) -> None:
    """Write the model folder again, keeping the weights' stored precision (float16 or float32)."""
    config = read_json(Path(folder) / "config.json", f"the model config of {folder}")
    model.save(folder, half=config.get("weights_dtype") == "float16")


def summary_line(result: dict[str, Any]) -> str:
    """One line for a terminal: the dev threshold and the test figures."""
    c, t = result["calibration"], result["test"]
    auc = "n/a" if t["roc_auc"] is None else f"{t['roc_auc']:.4f}"
    on = "probability " if c.get("threshold_on") == "probability" else ""
    ece = f", ECE {t['expected_calibration_error']:.4f}" if "expected_calibration_error" in t else ""
    at_07 = "" if on else f", accuracy at 0.7 {t['accuracy_at_0_7']:.4f}"
    return (
        f"{on}threshold {c['threshold']:.4f} (dev accuracy {c['dev_accuracy']:.4f} on {c['dev_pairs']:,} pairs) | "
        f"test: accuracy {t['accuracy']:.4f}, F1 {t['f1']:.4f}, ROC-AUC {auc}{ece}{at_07} ({t['pairs']:,} pairs)"
    )
