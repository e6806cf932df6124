"""dupq.evaluation.metrics: the metrics against scikit-learn, the threshold search against a brute-force loop, ECE against a loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from dupq.core.errors import DupqError
from dupq.evaluation.evaluate import pair_scores
from dupq.evaluation.metrics import (
    best_threshold,
    binary_metrics,
    expected_calibration_error,
    precision_recall_curve,
    reliability,
    roc_curve,
    threshold_free,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sklearn_binary(scores, labels, threshold):
    predicted = (scores > threshold).astype(int)
    return {
        "accuracy": skm.accuracy_score(labels, predicted),
        "precision": skm.precision_score(labels, predicted, zero_division=0),
        "recall": skm.recall_score(labels, predicted, zero_division=0),
        "f1": skm.f1_score(labels, predicted, zero_division=0),
        "confusion_matrix": skm.confusion_matrix(labels, predicted, labels=[0, 1]).tolist(),
    }


def assert_matches_sklearn(scores, labels, threshold):
    ours, ref = binary_metrics(scores, labels, threshold), sklearn_binary(scores, labels, threshold)
    assert ours["confusion_matrix"] == ref["confusion_matrix"]
    for key in ("accuracy", "precision", "recall", "f1"):
        assert ours[key] == pytest.approx(ref[key], abs=1e-12), key
    if 0 < labels.sum() < len(labels):
        free = threshold_free(scores, labels)
        assert free["roc_auc"] == pytest.approx(skm.roc_auc_score(labels, scores), abs=1e-12)
        assert free["average_precision"] == pytest.approx(skm.average_precision_score(labels, scores), abs=1e-12)


def assert_best_is_brute_force(scores, labels, metric):
    """best_threshold's value is the best of every threshold that can change a prediction (each distinct score, and
    below all) tried in a loop, and the threshold it returns really gives that value, float rounding included."""
    candidates = [float(s) for s in np.unique(scores)] + [float(scores.min()) - 1.0]
    best = best_threshold(scores, labels, metric)
    assert best["value"] == pytest.approx(max(binary_metrics(scores, labels, t)[metric] for t in candidates), abs=1e-12)
    assert binary_metrics(scores, labels, best["threshold"])[metric] == pytest.approx(best["value"], abs=1e-12)


@pytest.fixture(scope="module")
def real_scores(tiny_model, small_splits):
    """Scores of the tiny model on the 2,000 test pairs of the small (synthetic) split: a trained model's scores, not generated ones."""
    return pair_scores(tiny_model, small_splits.test), small_splits.test.labels.astype(int)


def test_seed_orientation_reproduces_the_seed_accuracy():
    # The seed's printed matrix [[4872 1510] [1309 2549]] and accuracy 0.72470703125.
    labels = np.r_[np.zeros(4872 + 1510), np.ones(1309 + 2549)].astype(int)
    scores = np.r_[np.full(4872, 0.1), np.full(1510, 0.9), np.full(1309, 0.1), np.full(2549, 0.9)]
    m = binary_metrics(scores, labels, 0.7)
    assert m["confusion_matrix"] == [[4872, 1510], [1309, 2549]]
    assert m["accuracy"] == 0.72470703125


def test_a_score_equal_to_the_threshold_is_not_a_duplicate():
    m = binary_metrics(np.array([0.7, 0.70001]), np.array([0, 1]), 0.7)
    assert m["confusion_matrix"] == [[1, 0], [0, 1]]


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.9])
def test_metrics_match_sklearn_on_real_model_scores(real_scores, threshold):
    scores, labels = real_scores
    assert len(np.unique(labels)) == 2
    assert_matches_sklearn(scores, labels, threshold)


def test_threshold_free_matches_sklearn_with_heavy_ties_on_real_scores(real_scores):
    scores, labels = real_scores
    coarse = np.round(scores, 1)  # ~20 distinct values over 2,000 pairs: ties everywhere
    assert len(np.unique(coarse)) < 30
    assert_matches_sklearn(coarse, labels, 0.7)


def test_curves_match_sklearn(real_scores):
    scores, labels = real_scores
    fpr, tpr, _ = roc_curve(scores, labels)
    ref_fpr, ref_tpr, _ = skm.roc_curve(labels, scores, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr)
    np.testing.assert_allclose(tpr, ref_tpr)
    precision, recall, thresholds = precision_recall_curve(scores, labels)
    ref_p, ref_r, ref_t = skm.precision_recall_curve(labels, scores, drop_intermediate=False)
    # scikit-learn lists them lowest threshold first and appends the (1, 0) end point.
    np.testing.assert_allclose(precision, ref_p[:-1][::-1])
    np.testing.assert_allclose(recall, ref_r[:-1][::-1])
    np.testing.assert_allclose(thresholds, ref_t[::-1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 1)), min_size=1, max_size=80), st.integers(-1, 13))
def test_metrics_match_sklearn_on_generated_tied_scores(rows, cut):
    scores = np.array([s / 12 for s, _ in rows])
    labels = np.array([y for _, y in rows])
    assert_matches_sklearn(scores, labels, cut / 12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1, 1, allow_nan=False, width=32), st.integers(0, 1)), min_size=2, max_size=80))
def test_metrics_match_sklearn_on_generated_float_scores(rows):
    scores = np.array([s for s, _ in rows], dtype=np.float32)
    labels = np.array([y for _, y in rows])
    assume(0 < labels.sum() < len(labels))
    assert_matches_sklearn(scores, labels, float(np.median(scores)))


def test_threshold_free_is_undefined_with_one_label():
    assert threshold_free(np.array([0.1, 0.9]), np.array([1, 1])) == {"roc_auc": None, "average_precision": None}


@pytest.mark.parametrize("metric", ["accuracy", "f1"])
def test_best_threshold_equals_brute_force_on_real_scores(real_scores, metric):
    assert_best_is_brute_force(*real_scores, metric)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 1)), min_size=1, max_size=40)
    | st.lists(st.tuples(st.floats(-1, 1, allow_nan=False), st.integers(0, 1)), min_size=1, max_size=40),
    st.sampled_from(["accuracy", "f1"]),
)
def test_best_threshold_equals_brute_force_on_generated_scores(rows, metric):
    assert_best_is_brute_force(np.array([float(s) for s, _ in rows]), np.array([y for _, y in rows]), metric)


def test_best_threshold_cuts_between_neighbouring_floats():
    a = 0.5
    b = float(np.nextafter(a, 1.0))
    best = best_threshold(np.array([a, b]), np.array([0, 1]))
    assert best["value"] == 1.0 and a <= best["threshold"] < b


def test_user_mistakes_are_one_sentence_errors():
    with pytest.raises(DupqError, match="differ in length"):
        binary_metrics(np.zeros(3), np.zeros(2), 0.5)
    with pytest.raises(DupqError, match="0 .* or 1"):
        threshold_free(np.zeros(2), np.array([0, 2]))
    with pytest.raises(DupqError, match="accuracy, f1"):
        best_threshold(np.zeros(2), np.array([0, 1]), "auc")
    with pytest.raises(DupqError, match="no pairs"):
        binary_metrics(np.zeros(0), np.zeros(0), 0.5)


def test_expected_calibration_error_matches_a_loop_over_bins():
    rng = np.random.default_rng(5)
    p = np.r_[rng.random(300), 1.0, 0.0]
    y = (rng.random(302) < p**2).astype(int)
    total = 0.0
    for b in range(10):
        inside = [(pi, yi) for pi, yi in zip(p, y) if min(int(pi * 10), 9) == b]
        if inside:
            total += len(inside) / len(p) * abs(np.mean([yi for _, yi in inside]) - np.mean([pi for pi, _ in inside]))
    assert expected_calibration_error(p, y) == pytest.approx(total, abs=1e-12)
    assert sum(reliability(p, y)["pairs"]) == len(p)
    perfect = np.repeat([0.1, 0.9], 10)
    assert expected_calibration_error(perfect, np.r_[[1] + [0] * 9, [1] * 9 + [0]]) == pytest.approx(0.0)
