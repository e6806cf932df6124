"""Judging a model on a split: its pair scores, every metric of them, the dev threshold, the summary.

:func:`evaluate` reports the metrics of :mod:`dupq.evaluation.metrics` of a split's pairs at the model's threshold.
:func:`calibrate` chooses the threshold (and fits the probability map) on the **dev** pairs, and :func:`evaluate` only
*reports* it on the test pairs: choosing it where it is reported would flatter the model (sentence-transformers'
``BinaryClassificationEvaluator`` does). :func:`calibrate_and_test` keeps both records in ``model.metrics``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs
from dupq.evaluation.calibration import fit_calibration, threshold_record
from dupq.evaluation.metrics import binary_metrics, expected_calibration_error, reliability, threshold_free
from dupq.modeling import verdict
from dupq.modeling.judge import PROBABILITY, SEED_THRESHOLD
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq.modeling.verdict import Verdicts, from_logits

PRIMARY = "accuracy"  # the seeds' headline figure
# The figures a summary of a model's test pairs shows, in order (`dupq evaluate`'s table, the report's).
SUMMARY = (
    "threshold",
    "accuracy",
    "precision",
    "recall",
    "f1",
    "roc_auc",
    "average_precision",
    "accuracy_at_0_7",
    "expected_calibration_error",
)


# Questions per LSTM batch when judging. On this project's 2-core CPU, encoding 32,768 questions
# took 1.4 s at 128 and 2.1 s at 1,024 (Model.encode's default), with peak memory 350 vs 800 MiB:
# a batch of long questions pads to (batch, 256 tokens, 4 * dim) gate activations.


def pair_logits(model: Model, pairs: Pairs, chunk: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's uncalibrated logit and cosine, ``(N,)`` float64 each, from one encoding, chunk by chunk."""
    logits, cosines = np.empty(len(pairs), dtype=np.float64), np.empty(len(pairs), dtype=np.float64)
    for start in range(0, len(pairs), chunk):
        stop = start + chunk
        q1, q2 = pairs.q1[start:stop], pairs.q2[start:stop]
        v = model.encode([*q1, *q2], batch_size=ENCODE_BATCH)  # (2n, d)
        u, w = v[: len(q1)], v[len(q1) :]
        logits[start:stop] = verdict.pair_logits(model, u, w)
        cosines[start:stop] = np.einsum("nd,nd->n", u, w)
    return logits, cosines


def pair_verdicts(model: Model, pairs: Pairs, threshold: float | None = None) -> Verdicts:
    """The model's judgement of every pair (:mod:`dupq.modeling.verdict`), at ``threshold`` (default: the model's)."""
    logits, cosines = pair_logits(model, pairs)
    return from_logits(model, logits, cosines, threshold)


def pair_scores(model: Model, pairs: Pairs, chunk: int = 8192, kind: str = "score") -> np.ndarray:
    """Every pair's ``(N,)`` score: what the model's threshold applies to (``kind="score"``), its
    uncalibrated logit (``"logit"``) or its cosine (``"similarity"``)."""
    logits, cosines = pair_logits(model, pairs, chunk)
    if kind == "logit":
        return logits
    judged = from_logits(model, logits, cosines)
    return judged.similarity if kind == "similarity" else judged.score


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def evaluate_scores(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """:func:`evaluate` on scores already computed: one plain dict of metrics (see there)."""
    return {
        "primary_metric": PRIMARY,
        **binary_metrics(scores, labels, threshold),
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
    judged = pair_verdicts(model, pairs, threshold)
    result = evaluate_scores(judged.score, pairs.labels, judged.threshold)
    result["threshold_on"] = judged.on
    result["threshold_chosen_on"] = "given" if given else model.judge.threshold_info.get("chosen_on", "unknown")
    if judged.probability is not None:
        result["expected_calibration_error"] = expected_calibration_error(judged.probability, pairs.labels)
        result["reliability"] = reliability(judged.probability, pairs.labels)
    return result


MIN_PER_LABEL = 10  # dev pairs of each label a threshold is chosen on: with fewer, the threshold is chance


def check_dev_labels(labels: np.ndarray) -> None:
    """Refuse dev labels that cannot choose a threshold: both labels, :data:`MIN_PER_LABEL` of each at least.

    On duplicates alone the accuracy-best threshold lies below every pair, on non-duplicates alone
    above every pair (0.9988 once: "dev accuracy 1.0000", and afterwards a question was judged
    different from itself); neither says anything about new pairs.
    """
    duplicates = int(np.sum(labels))
    others = len(labels) - duplicates
    if min(duplicates, others) < MIN_PER_LABEL:
        raise DupqError(
            f"the dev pairs hold {duplicates:,} duplicates and {others:,} non-duplicates; choosing a threshold needs "
            f"at least {MIN_PER_LABEL} of each, so give more dev pairs of both labels (nothing was saved)."
        )


def calibrate(model: Model, dev_pairs: Pairs, smooth: bool = False) -> dict[str, Any]:
    """Choose the model's threshold on the **dev** pairs: the one maximising accuracy.

    The F1-maximising threshold is found too and kept for reference (a user who cares more about finding every duplicate
    than about being right overall may prefer it). Sets ``model.judge.threshold`` and ``threshold_info`` (saved in
    ``config.json`` by ``model.save``) and returns the calibration record. Never pass test pairs here. ``smooth``: see
    :func:`~dupq.evaluation.calibration.fit_calibration` (for a few pairs).
    """
    if not len(dev_pairs):
        raise DupqError("there are no dev pairs to calibrate the threshold on; give the split a dev part.")
    check_dev_labels(dev_pairs.labels)
    logits, cosines = pair_logits(model, dev_pairs)
    if 0 < dev_pairs.labels.sum() < len(dev_pairs):
        model.judge.calibration = fit_calibration(logits, dev_pairs.labels, smooth)
    scores = from_logits(model, logits, cosines).score  # with the calibration just fitted
    record = {
        **threshold_record(scores, dev_pairs.labels),
        "dev_accuracy_at_0_7": binary_metrics(scores, dev_pairs.labels, SEED_THRESHOLD)["accuracy"],
        "threshold_on": model.threshold_on,
        "probability_calibration": model.judge.calibration,
        "dev_pairs": len(dev_pairs),
        "dev_rows": [int(dev_pairs.rows.min()), int(dev_pairs.rows.max())],
        "model_fingerprint": model.fingerprint(),
    }
    model.judge.threshold = record["threshold"]
    model.judge.threshold_info = record
    return record


FOLDS = 5  # folds of the cross-validation that judges a calibration on a help desk's decisions
TRUSTED = 50  # decisions of each label below which a calibration fitted on them is said to be too few to trust


def calibrate_on_decisions(model: Model, pairs: Pairs, log=print) -> dict[str, Any]:
    """Calibrate the model on a help desk's own decisions (``dupq index decisions``), if they can be trusted.

    The model's own accuracy, ROC-AUC, ECE and Brier score on the pairs are reported (``log``) beside those of a
    calibration fitted on them, judged by :data:`FOLDS`-fold cross-validation (each fold scored by a map and a threshold
    fitted on the others; a fit judged on its own pairs flatters itself). A fit no better than the decisions' share of
    duplicates (noise, or contradictory decisions: a flat map, under which the model never finds a duplicate again), or
    worse than the model's own probabilities, is refused and the model left as it was; fewer than :data:`TRUSTED` of a
    label is said to be too few to trust. Otherwise as :func:`calibrate`, with Platt's smoothed targets, and its record
    (``"decisions"``: the figures) is returned.
    """
    if not len(pairs):
        raise DupqError("there are no pairs to calibrate on.")
    check_dev_labels(pairs.labels)
    y = pairs.labels.astype(np.int64)
    logits, cosines = pair_logits(model, pairs)
    own = from_logits(model, logits, cosines)
    before = _figures(own.score, own.probability, y, own.duplicate)
    score, probability, verdict = _cross_validated(model, logits, cosines, y)
    after = _figures(score, probability, y, verdict)
    duplicates, others = int(y.sum()), int(len(y) - y.sum())
    log(f"the model's own on these {len(y):,} pairs: {_said(before)}")
    log(f"calibrated on them ({FOLDS}-fold cross-validated): {_said(after)}")
    if min(duplicates, others) < TRUSTED:
        log(
            f"warning: {duplicates:,} duplicates and {others:,} distinct pairs are too few to trust a calibration "
            f"(at least {TRUSTED} of each); judge its figures with that in mind."
        )
    base = float(np.mean((y - y.mean()) ** 2))  # the Brier score of always saying the share of duplicates
    if after["brier"] >= base:
        raise DupqError(
            f"the calibration fitted on {_decisions_named(len(y))} predicts them no better than their share of duplicates "
            f"(Brier {after['brier']:.4f} against {base:.4f}): the decisions do not follow the model's scores, so the "
            "model was left as it was."
        )
    if before["brier"] is not None and after["brier"] > before["brier"]:
        raise DupqError(
            f"the calibration fitted on {_decisions_named(len(y))} judges them worse than the model's own (Brier "
            f"{after['brier']:.4f} against {before['brier']:.4f}, cross-validated), so the model was left as it was."
        )
    record = calibrate(model, pairs, smooth=True)
    record["decisions"] = {"before": before, "after": after, "too_few": min(duplicates, others) < TRUSTED}
    model.judge.threshold_info = record
    return record


def _decisions_named(n: int) -> str:
    return f"{n:,} decision{'s' if n != 1 else ''}"


def _cross_validated(model: Model, logits: np.ndarray, cosines: np.ndarray, y: np.ndarray) -> tuple:
    """Each pair's score, probability and verdict under a map and threshold fitted on the other folds."""
    import copy

    order = np.argsort(y, kind="stable")  # (N,) folds stratified by label
    fold = np.empty(len(y), dtype=np.int64)
    fold[order] = np.arange(len(y)) % FOLDS
    score, probability, verdict = np.empty(len(y)), np.empty(len(y)), np.empty(len(y), dtype=bool)
    for f in range(FOLDS):
        train, test = fold != f, fold == f
        fitted = copy.copy(model)
        fitted.calibration = fit_calibration(logits[train], y[train], smooth=True)
        seen = from_logits(fitted, logits[train], cosines[train]).score
        threshold = threshold_record(seen, y[train])["threshold"]
        judged = from_logits(fitted, logits[test], cosines[test], threshold)
        score[test], probability[test], verdict[test] = judged.score, judged.probability, judged.duplicate
    return score, probability, verdict


def _figures(score: np.ndarray, probability: np.ndarray | None, y: np.ndarray, verdict: np.ndarray) -> dict:
    return {
        "accuracy": float(np.mean(verdict == (y == 1))),
        "roc_auc": threshold_free(score, y)["roc_auc"],
        "ece": None if probability is None else expected_calibration_error(probability, y),
        "brier": None if probability is None else float(np.mean((probability - y) ** 2)),
    }


def _said(figures: dict) -> str:
    return ", ".join(
        f"{name} {'n/a' if figures[key] is None else f'{figures[key]:.4f}'}"
        for name, key in (("accuracy", "accuracy"), ("ROC-AUC", "roc_auc"), ("ECE", "ece"), ("Brier", "brier"))
    )


def calibrate_and_test(model: Model, dev: Pairs, test: Pairs) -> dict[str, Any]:
    """Calibrate on ``dev``, then evaluate on ``test`` at that threshold; both go into ``model.metrics``.

    The caller saves the model (``model.save``) to store the threshold and the metrics.
    """
    calibration = calibrate(model, dev)
    test_metrics = evaluate(model, test)
    test_metrics["test_rows"] = [int(test.rows.min()), int(test.rows.max())]
    model.metrics = {**model.metrics, "calibration": calibration, "test": test_metrics}
    return {"calibration": calibration, "test": test_metrics}


def summary_line(result: dict[str, Any]) -> str:
    """One line for a terminal: the dev threshold and the test figures."""
    c, t = result["calibration"], result["test"]
    auc = "n/a" if t["roc_auc"] is None else f"{t['roc_auc']:.4f}"
    on = "probability " if c.get("threshold_on") == PROBABILITY else ""
    ece = f", ECE {t['expected_calibration_error']:.4f}" if "expected_calibration_error" in t else ""
    at_07 = "" if on else f", accuracy at 0.7 {t['accuracy_at_0_7']:.4f}"
    return (
        f"{on}threshold {c['threshold']:.4f} (dev accuracy {c['dev_accuracy']:.4f} on {c['dev_pairs']:,} pairs) | "
        f"test: accuracy {t['accuracy']:.4f}, F1 {t['f1']:.4f}, ROC-AUC {auc}{ece}{at_07} ({t['pairs']:,} pairs)"
    )
