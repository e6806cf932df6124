"""How well each calibration method turns a model's pair logits into probabilities; one JSON line.

    dupq-lab calibration --model runs/model [--data PATH]

Each method is fitted on the dev pairs and scored on the test pairs (expected calibration error,
10 equal-width bins, and log-loss): the raw sigmoid of the logit, Platt scaling (a logistic
regression on the logit), beta calibration (what `dupq calibrate` fits) and isotonic regression
(scikit-learn; a step function, for reference).
"""

from __future__ import annotations

import json

import numpy as np
import typer
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from dupq.data.pairs import read_pairs, split_pairs
from dupq.evaluation.calibration import fit_calibration
from dupq.evaluation.evaluate import pair_scores
from dupq.evaluation.metrics import expected_calibration_error
from dupq.modeling.model import Model
from dupq.modeling.probability import calibrated
from dupq_lab.options import DATA, Data, ModelFolder


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def main(model: ModelFolder = None, data: Data = DATA) -> None:
    model_folder, model = model, Model.load(model)
    splits = split_pairs(read_pairs(data)[0])
    dev, test = pair_scores(model, splits.dev, kind="logit"), pair_scores(model, splits.test, kind="logit")
    y_dev, y_test = splits.dev.labels.astype(int), splits.test.labels.astype(int)
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(dev[:, None], y_dev)
    isotonic = IsotonicRegression(out_of_bounds="clip").fit(dev, y_dev)
    beta = fit_calibration(dev, y_dev)
    methods = {
        "sigmoid": (calibrated(None, dev), calibrated(None, test)),
        "platt": (platt.predict_proba(dev[:, None])[:, 1], platt.predict_proba(test[:, None])[:, 1]),
        "beta": (calibrated(beta, dev), calibrated(beta, test)),
        "isotonic": (isotonic.predict(dev), isotonic.predict(test)),
    }
    print(
        json.dumps(
            {
                "model": str(model_folder or "bundled"),
                **{
                    name: {
                        "dev_ece": round(expected_calibration_error(p_dev, y_dev), 4),
                        "test_ece": round(expected_calibration_error(p_test, y_test), 4),
                        "test_log_loss": round(log_loss(p_test, y_test), 4),
                    }
                    for name, (p_dev, p_test) in methods.items()
                },
            }
        )
    )


if __name__ == "__main__":
    typer.run(main)
