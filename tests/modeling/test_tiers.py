"""The verdict that transfers: identical texts are duplicates, and search hits come in two tiers.

* a question against its own text has probability >= 0.99, whatever the model (a pair head, a cosine);
* the tier thresholds are the ones a brute-force search over every threshold finds on synthetic
  scored pairs (the lowest whose precision is >= 0.95, and >= 0.5 for ``suggest``);
* the margins of a search are a plain loop's; the hits of a collection carry tiers consistent with
  their probability, and ``duplicate`` is the duplicate tier.
"""

from __future__ import annotations

import numpy as np
import pytest

from dupq.collection.collection import Collection
from dupq.evaluation.calibration import DUPLICATE_PRECISION, SUGGEST_PRECISION, fit_search_calibration
from dupq.evaluation.metrics import threshold_at_precision
from dupq.modeling.model import Model
from dupq.modeling.probability import held_up, identity_floor, search_calibrated
from dupq.modeling.verdict import DUPLICATE, for_search, search_margins, search_tiers, tiers

QUESTIONS = ["How do I learn Python quickly?", "What is the capital of France?", "How can I lose weight fast?"]
QUESTIONS += ["Why is the sky blue?", "What is the best way to learn guitar?"]


@pytest.mark.parametrize("which", ["tiny_model", "head_model"])
def test_a_question_against_its_own_text_is_a_duplicate(which, request):
    model = request.getfixturevalue(which)
    p_self = model.probability(QUESTIONS, QUESTIONS)
    assert p_self.min() >= 0.99, p_self
    assert model.probability(["How do I learn Python quickly ?"], [QUESTIONS[0]])[0] >= 0.99  # the same words


def test_the_identity_floor_never_lowers_a_probability():
    cos = np.array([1.0, 0.999995, 0.9995, 0.99, 0.2])
    p = np.array([0.1, 0.2, 0.9, 0.3, 0.7])
    assert held_up(p, cos).tolist() == [1.0, 1.0, 0.9, 0.3, 0.7]
    assert identity_floor(cos).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


def brute_force(scores: np.ndarray, labels: np.ndarray, precision: float) -> set[int]:
    """The pairs flagged at the lowest threshold (every score, one above all, one below all) whose ``score > t``
    has ``precision``."""
    best: set[int] = set()
    for t in sorted(set(scores.tolist()) | {scores.max() + 1, scores.min() - 1}, reverse=True):
        flagged = scores > t
        if flagged.any() and labels[flagged].mean() >= precision:
            best = set(np.flatnonzero(flagged).tolist())
    return best


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("precision", [SUGGEST_PRECISION, DUPLICATE_PRECISION])
def test_the_tier_threshold_is_a_brute_force_search(seed, precision):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    labels = rng.integers(0, 2, n)
    scores = np.round(rng.normal(labels * 1.5, 1.0), int(rng.integers(1, 4)))  # ties too
    t = threshold_at_precision(scores, labels, precision)["threshold"]
    assert set(np.flatnonzero(scores > t).tolist()) == brute_force(scores, labels, precision)


def test_the_fitted_tiers_are_brute_force_searches_over_its_probabilities():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    logits = rng.normal(labels * 2.0, 1.5)
    cosines = np.clip(0.5 + 0.1 * logits + rng.normal(0, 0.05, 400), -1, 1)
    margins = rng.normal(labels * 0.05, 0.05)
    fit = fit_search_calibration(logits, cosines, margins, labels)
    p = held_up(search_calibrated(fit, logits, cosines, margins), cosines)
    for tier, precision in (("suggest", SUGGEST_PRECISION), ("duplicate", DUPLICATE_PRECISION)):
        assert set(np.flatnonzero(p > fit[tier]).tolist()) == brute_force(p, labels, precision), tier
    assert fit["margin"] > 0  # a hit that stands out from its search is likelier a duplicate


def test_search_margins_are_a_plain_loop():
    rng = np.random.default_rng(1)
    cos = -np.sort(-np.round(rng.uniform(-1, 1, (60, 6)), 1), axis=1)  # rounded: the same question stored twice
    found = np.arange(6)[None, :] < rng.integers(1, 7, 60)[:, None]
    got = search_margins(cos, found)
    for q in range(60):
        hits = cos[q, : int(found[q].sum())].tolist()
        for j, c in enumerate(hits):
            if c == hits[0]:  # the top question, or it again: over the best different one
                others = [o for o in hits if o != hits[0]]
                want = c - (max(others) if others else 0.0)
            else:
                want = c - hits[0]
            assert got[q, j] == pytest.approx(want), (q, j)


@pytest.fixture
def tiered(tiny_model_dir) -> Model:
    """The tiny model with a search calibration of round numbers: tiers at 0.3 and 0.7."""
    model = Model.load(tiny_model_dir)
    weights = {"a": 0.5, "b": 0.5, "c": -0.5, "cosine": 1.0, "margin": 8.0, "margin_range": [-0.5, 0.3]}
    model.judge.search_calibration = {**weights, "suggest": 0.3, "duplicate": 0.7}
    return model


def test_hits_carry_tiers_consistent_with_their_probability(tiered, tmp_path):
    stored = QUESTIONS + ["How do I learn Python fast?", "What's the capital city of France?"]
    with Collection.build(tmp_path / "c", stored, tiered) as coll:
        assert coll.tiers == {"suggest": 0.3, "duplicate": 0.7, "on": "probability"}
        rows = coll.search(["How do I learn Python quickly?", "capital of France", "Why is the sky blue?"], k=4)
        hits = [h for row in rows for h in row]
        p = np.array([h.probability for h in hits])
        assert [h.tier for h in hits] == tiers(p, 0.3, 0.7).tolist()
        assert [h.duplicate for h in hits] == [h.tier == DUPLICATE for h in hits]
        assert rows[0][0].text == QUESTIONS[0] and rows[0][0].probability >= 0.99  # a stored question's own text
        assert rows[2][0].tier == DUPLICATE
        # k=1 judges the top hit as k=4 does: its margin is over the runner-up, searched all the same
        top = coll.search(["capital of France"], k=1)[0][0]
        assert (top.id, top.probability, top.tier) == (rows[1][0].id, rows[1][0].probability, rows[1][0].tier)


def test_without_a_search_calibration_both_tiers_are_the_models_threshold(tiny_model):
    cos = np.array([0.95, 0.5, 0.1])
    judged = for_search(tiny_model, cos, np.zeros(3))
    assert search_tiers(tiny_model)["suggest"] == search_tiers(tiny_model)["duplicate"] == tiny_model.threshold
    assert judged.tier.tolist() == [DUPLICATE if d else None for d in judged.duplicate]
