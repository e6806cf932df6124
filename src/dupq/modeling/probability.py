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


# Identical texts. After the tokenizer's normalisation two identical questions are one sequence of words, so any
# encoder gives them one vector: their cosine is 1 (up to float rounding), whatever the model. Their probability is
# 1, so that no calibration can call a question a stranger to itself. Only identical vectors: a ramp below them
# would turn the float32 noise of a cosine (1e-7) into a probability that differs between entry points.
IDENTICAL = 1 - 1e-5  # the cosine from which a pair is identical (float32 rounding of one vector with itself)


def identity_floor(cosines: np.ndarray) -> np.ndarray:
    """The least probability ``(N,)`` of pairs of these cosines: 1 for identical vectors (cosine >= :data:`IDENTICAL`),
    else 0.

    >>> identity_floor(np.array([1.0, 0.999995, 0.999, 0.5])).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    return np.where(np.asarray(cosines, dtype=np.float64) >= IDENTICAL, 1.0, 0.0)


def held_up(probabilities: np.ndarray, cosines: np.ndarray) -> np.ndarray:
    """Probabilities ``(N,)`` no lower than the :func:`identity_floor` of their pairs' cosines."""
    return np.maximum(probabilities, identity_floor(cosines))


def search_features(logits: np.ndarray, cosines: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """The features of a search calibration ``(N, 4)``: the beta features of the pair logit (:func:`beta_features`),
    the cosine, and the hit's margin over the best other hit of its search (see :func:`search_calibrated`)."""
    return np.column_stack([beta_features(logits), np.asarray(cosines, np.float64), np.asarray(margins, np.float64)])


def search_calibrated(calibration: dict, logits: np.ndarray, cosines: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Probabilities of search hits under a search calibration (``config.json``'s ``search_calibration``).

    ``p = sigmoid(a ln s - b ln(1 - s) + w_cos cos + w_margin margin + c)``, ``s = sigmoid(logit)``: beta
    calibration (Kull et al. 2017) with two more terms a search knows and a lone pair does not, fitted
    on help-desk searches (:func:`dupq.evaluation.search_calibration.fit_search_calibration`). A hit's
    ``margin`` is its cosine less the best cosine of the other hits of its search (for the top hit, the
    runner-up's: how far it stands out; for the others, below zero), clipped to the range the fit saw.
    """
    low, high = calibration["margin_range"]
    f = search_features(logits, cosines, np.clip(margins, low, high))
    w = np.array([calibration["a"], calibration["b"], calibration["cosine"], calibration["margin"]])
    return sigmoid(f @ w + calibration["c"])
