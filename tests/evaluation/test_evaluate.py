"""dupq.evaluation.evaluate: a model's threshold chosen on dev pairs, its test pairs only reported on (checked with scikit-learn)."""

from __future__ import annotations

import pytest
from sklearn import metrics as skm

from dupq.evaluation.evaluate import calibrate, evaluate, pair_scores
from dupq.evaluation.metrics import best_threshold
from dupq.modeling.model import Model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def accuracy(scores, labels, threshold):
    return skm.accuracy_score(labels, scores > threshold)


def test_calibrate_chooses_on_dev_and_evaluate_reports_on_test(tiny_model_dir, small_splits):
    model = Model.load(tiny_model_dir)
    dev, test = small_splits.dev, small_splits.test
    dev_scores = pair_scores(model, dev)
    record = calibrate(model, dev)
    assert model.threshold == record["threshold"] == best_threshold(dev_scores, dev.labels, "accuracy")["threshold"]
    assert record["f1_threshold"] == best_threshold(dev_scores, dev.labels, "f1")["threshold"]
    assert record["dev_accuracy"] == accuracy(dev_scores, dev.labels, model.threshold)
    assert record["dev_accuracy_at_0_7"] == accuracy(dev_scores, dev.labels, 0.7)
    assert record["dev_rows"] == [int(dev.rows.min()), int(dev.rows.max())]
    assert model.judge.threshold_info["chosen_on"] == "dev pairs"

    result = evaluate(model, test)
    keys = "threshold accuracy precision recall f1 roc_auc average_precision confusion_matrix accuracy_at_0_7"
    for key in [*keys.split(), "pairs", "primary_metric"]:
        assert key in result, key
    assert result["threshold"] == model.threshold and result["pairs"] == len(test)
    assert sum(map(sum, result["confusion_matrix"])) == len(test)
    scores = pair_scores(model, test)
    assert result["accuracy_at_0_7"] == accuracy(scores, test.labels, 0.7)
    assert evaluate(model, test, threshold=0.7)["accuracy"] == result["accuracy_at_0_7"]
    assert result["accuracy"] == accuracy(scores, test.labels, model.threshold)  # at the dev-chosen threshold
