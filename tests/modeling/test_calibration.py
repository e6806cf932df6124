"""dupq.modeling.probability: the beta fit against scikit-learn's logistic regression, the dev threshold against a loop."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm
from sklearn.linear_model import LogisticRegression

from dupq.evaluation.calibration import fit_calibration, threshold_record
from dupq.evaluation.metrics import expected_calibration_error
from dupq.modeling.probability import beta_features, calibrated


def test_beta_calibration_matches_scikit_learn_logistic_regression_on_its_features():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=2000) * 3
    true = 1 / (1 + np.exp(-(1.7 * logits - 0.4 + 0.3 * np.maximum(logits, 0))))  # an asymmetric miscalibration
    labels = (rng.random(2000) < true).astype(int)
    fit = fit_calibration(logits, labels)
    reference = LogisticRegression(C=1e6, tol=1e-10, max_iter=1000).fit(beta_features(logits), labels)
    assert [fit["a"], fit["b"]] == pytest.approx(reference.coef_[0].tolist(), rel=1e-3)
    assert fit["c"] == pytest.approx(reference.intercept_[0], abs=1e-3)
    p = calibrated(fit, logits)
    q = reference.predict_proba(beta_features(logits))[:, 1]
    assert np.allclose(p, q, atol=2e-3)

    def log_loss(x):
        return -np.mean(labels * np.log(x) + (1 - labels) * np.log(1 - x))

    assert log_loss(p) <= log_loss(q) + 1e-7  # Newton reaches the optimum scikit-learn approaches
    assert expected_calibration_error(p, labels) < expected_calibration_error(1 / (1 + np.exp(-logits)), labels)
    # The identity calibration leaves the sigmoid alone.
    assert np.allclose(calibrated({"a": 1.0, "b": 1.0, "c": 0.0}, logits), 1 / (1 + np.exp(-logits)))


def test_threshold_record_keeps_the_best_dev_accuracy_and_f1_of_a_loop():
    rng = np.random.default_rng(6)
    labels = (rng.random(400) < 0.4).astype(int)
    scores = np.round(labels * 0.3 + rng.normal(size=400) * 0.3, 2)  # ties, as a coarse score has
    record = threshold_record(scores, labels)
    cuts = [float(s) for s in np.unique(scores)] + [float(scores.min()) - 1.0]
    best_accuracy = max(skm.accuracy_score(labels, scores > t) for t in cuts)
    best_f1 = max(skm.f1_score(labels, scores > t, zero_division=0) for t in cuts)
    assert record["dev_accuracy"] == pytest.approx(best_accuracy, abs=1e-12)
    assert skm.accuracy_score(labels, scores > record["threshold"]) == pytest.approx(best_accuracy, abs=1e-12)
    assert record["dev_f1_at_f1_threshold"] == pytest.approx(best_f1, abs=1e-12)
    assert skm.f1_score(labels, scores > record["f1_threshold"]) == pytest.approx(best_f1, abs=1e-12)
    assert record["chosen_on"] == "dev pairs" and record["metric"] == "accuracy"
