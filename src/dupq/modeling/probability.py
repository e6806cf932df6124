"""A model's calibration: the map from a pair's logit to the probability it reports.

Beta calibration, ``p = sigmoid(a ln s - b ln(1 - s) + c)`` with ``s = sigmoid(logit)`` (Kull,
Silva Filho & Flach 2017): :func:`calibrated` applies the numbers ``a, b, c`` that
:func:`dupq.evaluation.calibration.fit_calibration` fitted on dev pairs. Pure numpy.
"""

from __future__ import annotations

import numpy as np


def beta_features(logits: np.ndarray) -> np.ndarray:
    """``[ln s, -ln(1 - s)]`` of ``s = sigmoid(logit)``, ``(N, 2)``, computed without overflow."""
    z = np.asarray(logits, dtype=np.float64)
    return np.column_stack([-np.logaddexp(0, -z), np.logaddexp(0, z)])


EXP_LIMIT = 700.0  # |x| beyond which exp(x) overflows float64 (709.78); sigmoid(+-700) is 1 or ~1e-304 anyway


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow: x is clipped where the answer is 0 or 1 to float64 anyway."""
    return 1 / (1 + np.exp(-np.clip(x, -EXP_LIMIT, EXP_LIMIT)))


def calibrated(calibration: dict[str, float] | None, logits: np.ndarray) -> np.ndarray:
    """Probabilities from logits under ``calibration`` (None: the plain sigmoid)."""
    z = np.asarray(logits, dtype=np.float64)
    if calibration is None:
        return sigmoid(z)
    f = beta_features(z)
    return sigmoid(calibration["a"] * f[:, 0] + calibration["b"] * f[:, 1] + calibration["c"])
