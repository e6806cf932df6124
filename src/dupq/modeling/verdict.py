"""The verdict rule: how a pair's cosine (and its pair logit) become its probability and the verdict.

Every entry point that says whether two questions are duplicates calls this module, so that they all agree (``Model``,
``dupq predict``, ``POST /similarity``, search hits, ``dupq dedup``, ``dupq evaluate`` and ``report``, a freshly trained
model's threshold). It reads a model's judging settings (``threshold``, ``threshold_on``, ``calibration``, the pair
head); docs/judge.md tells the rule to users.

- A model gives ``P(duplicate)`` when it has a beta calibration fitted on dev pairs or a pair head
  (trained with a logistic loss); else the probability is None.
- ``threshold_on`` says which score the threshold applies to (``"similarity"``: the seed's
  ``d > threshold``; ``"probability"``); a duplicate is strictly above it (:func:`above`).
- Without an mlp head the logit is a function of the cosine alone, so search hits are judged
  from their cosines without fetching the stored vectors.
- Identical vectors (one question after normalisation) have probability 1
  (:func:`dupq.modeling.probability.identity_floor`).
- Search hits come in two tiers, ``suggest`` and ``duplicate`` (precision >= 0.95 where fitted),
  from a ``search_calibration`` that also reads how far a hit stands out of its search
  (:func:`for_search`); without one both tiers are the model's threshold. Dedup's pairs have no
  margin: :func:`dedup_tiers`.

Front doors for pairs, all ending in :func:`_decide`: :func:`from_vectors`, :func:`from_logits` (computed already, as
evaluation does in bulk), :func:`from_cosines` (a search's, vectors fetched only for an mlp head) and :func:`on_cosines`
(a given threshold, ``dupq dedup --on similarity``). :func:`clip_cosines` keeps a cosine of unit vectors in [-1, 1];
:func:`verdict_json` is one pair's verdict as ``dupq predict --json`` prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dupq.core.errors import DupqError
from dupq.modeling.judge import PROBABILITY, PROBABILITY_THRESHOLD, SEED_THRESHOLD, SIMILARITY
from dupq.modeling.probability import calibrated, held_up, search_calibrated

if TYPE_CHECKING:
    from dupq.modeling.architecture import HeadConfig
    from dupq.modeling.encoding import TextEncoder
    from dupq.modeling.judge import Judge

SUGGEST, DUPLICATE = "suggest", "duplicate"  # the tiers of a hit, least sure first
SAME_COSINE = 1e-6  # hits whose cosines to the query are this close are one question stored more than once
SCORE_NAMES = {SIMILARITY: "cosine similarity", PROBABILITY: "calibrated probability"}  # for reports
NEEDS_VECTORS = "this model's probability needs both question vectors, not only their cosine."
NO_PROBABILITY = "this model has no probability calibration; run `dupq calibrate` on it first."

Vectors = tuple[np.ndarray, np.ndarray]  # (u, v): the two unit vectors of each pair, (N, d) each


class Judging(Protocol):
    """What the rule reads of a model: its judge (:mod:`dupq.modeling.judge`: head, calibration, threshold)
    and, of its encoder, which part of a vector the pair head reads."""

    judge: Judge
    encoder: TextEncoder


@dataclass(frozen=True)
class Verdicts:
    """The judgement of ``N`` pairs."""

    similarity: np.ndarray  # (N,) float64 cosine of the two question vectors, in [-1, 1]
    probability: np.ndarray | None  # (N,) float64 P(duplicate); None: the model gives none, or it was not asked for
    score: np.ndarray  # (N,) float64 what the threshold was compared with: the similarity or the probability
    duplicate: np.ndarray  # (N,) bool: score > threshold
    threshold: float  # the threshold used (the model's unless the caller gave one)
    on: str  # which score ``score`` is: SIMILARITY or PROBABILITY (the model's threshold_on)
    tier: np.ndarray | None = None  # (N,) object: "duplicate", "suggest" or None (search hits only)

    def __len__(self) -> int:
        return len(self.similarity)

    def required_probability(self) -> np.ndarray:
        """The probabilities, refused in one sentence when the model gives none."""
        if self.probability is None:
            raise DupqError(NO_PROBABILITY)
        return self.probability


def above(scores: np.ndarray, threshold: float) -> np.ndarray:
    """The verdict of scores ``(N,)`` at ``threshold``: True (a duplicate) when strictly above it,
    the seed's ``d > threshold``.

    >>> above(np.array([0.9, 0.7, 0.3]), 0.7).tolist()
    [True, False, False]
    """
    return np.asarray(scores) > threshold


def tiers(scores: np.ndarray, suggest: float, duplicate: float) -> np.ndarray:
    """The tier ``(N,)`` of each score: ``"duplicate"`` above the duplicate threshold, else ``"suggest"`` above
    the suggest one, else None (:func:`above`'s rule for each).

    >>> tiers(np.array([0.9, 0.5, 0.1]), 0.3, 0.8).tolist()
    ['duplicate', 'suggest', None]
    """
    out = np.full(len(scores), None, dtype=object)
    out[above(scores, suggest)] = SUGGEST
    out[above(scores, duplicate)] = DUPLICATE
    return out


def search_margins(cosines: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Each hit's margin ``(Q, K)`` over the best other question of its search, from the cosines ``(Q, K)`` of
    searches best first (``found``: which are hits; the rest is padding): a hit's cosine less the top hit's,
    and for the top hit (and any hit of the same cosine: the same question stored again) less the best
    lower cosine (0 when there is none: the search calibration clips it to the largest margin it saw).

    >>> search_margins(np.array([[0.9, 0.9, 0.7, 0.6]]), np.array([[True] * 4])).round(2).tolist()
    [[0.2, 0.2, -0.2, -0.3]]
    """
    cos = np.asarray(cosines, dtype=np.float64)
    top = cos[:, :1]  # (Q, 1)
    same = found & (cos >= top - SAME_COSINE)  # (Q, K) the top question and its repeats
    runner_up = np.where(found & ~same, cos, -np.inf).max(axis=1, initial=-np.inf)  # (Q,)
    runner_up = np.where(np.isfinite(runner_up), runner_up, 0.0)[:, None]  # (Q, 1)
    return np.where(same, cos - runner_up, cos - top)


def clip_cosines(cosines: Any) -> Any:
    """Cosines of unit vectors (an array or one float) kept in [-1, 1], its dtype kept: float32
    rounding can give 1.0000001. Every cosine a user sees passes through here."""
    return np.clip(cosines, -1.0, 1.0)


def verdict_json(similarity: float, duplicate: bool, threshold: float, probability: float | None) -> dict[str, Any]:
    """One pair's verdict as its JSON object: ``similarity``, ``duplicate``, ``threshold`` and, where
    the model gives one, ``probability``, scores rounded to 6 decimals (``dupq predict --json``)."""
    obj: dict[str, Any] = {"similarity": round(similarity, 6), "duplicate": duplicate, "threshold": threshold}
    if probability is not None:
        obj["probability"] = round(probability, 6)
    return obj


def has_probability(model: Judging) -> bool:
    """Whether the model gives ``P(duplicate)``: it has a calibration or a pair head."""
    return model.judge.has_probability


def needs_vectors(model: Judging) -> bool:
    """Whether a pair's probability depends on more than its cosine: an mlp pair head reads both vectors,
    and any head of a model with a static branch reads the model's half of them (its cosine is not the search's)."""
    head = model.judge.head_config
    return _reads_vectors(head) or (head is not None and not model.encoder.cosine_is_judged)


def pair_logits(model: Judging, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The uncalibrated pair logit ``(N,)`` of the model's vectors ``u``, ``v`` ``(N, d)``: its judge's logit
    of the part of them that the pair head reads."""
    return model.judge.logits(model.encoder.judged(u), model.encoder.judged(v))


def judging_before_calibration(head: HeadConfig | None) -> dict[str, Any]:
    """How a freshly trained model judges pairs until its threshold is chosen on dev pairs, as
    :class:`~dupq.modeling.judge.Judge`'s keyword arguments ``threshold_on``, ``threshold`` and
    ``threshold_info``: on the probability (at 0.5) when an mlp head reads more than the cosine,
    else on the cosine at the seeds' 0.7 (a cosine head's probability is monotone in the cosine)."""
    if _reads_vectors(head):
        on, threshold = PROBABILITY, PROBABILITY_THRESHOLD
        chosen_on = "the default for a probability, until calibrated on dev"
    else:
        on, threshold, chosen_on = SIMILARITY, SEED_THRESHOLD, "the seeds' fixed value"
    return {"threshold_on": on, "threshold": threshold, "threshold_info": {"chosen_on": chosen_on}}


def from_vectors(
    model: Judging, u: np.ndarray, v: np.ndarray, threshold: float | None = None, probability: bool = True
) -> Verdicts:
    """Pairs whose two unit vectors ``u``, ``v`` ``(N, d)`` are in hand (the model's methods, ``dupq
    predict``, ``POST /similarity``): the cosine is their dot product, the logit the pair head's.

    ``probability=False`` computes the probability only when the verdict compares it."""
    similarity = np.einsum("nd,nd->n", u, v)  # (N,)
    logits = pair_logits(model, u, v) if _wants_probability(model, probability) else None
    return _decide(model, similarity, logits, threshold)


def from_logits(model: Judging, logits: np.ndarray, similarity: np.ndarray, threshold: float | None = None) -> Verdicts:
    """Pairs scored already (``dupq evaluate``, ``report``, the dev threshold): each pair's uncalibrated
    logit (:func:`pair_logits`) and cosine, ``(N,)`` each."""
    return _decide(model, similarity, logits if has_probability(model) else None, threshold)


def from_cosines(
    model: Judging,
    cosines: np.ndarray,
    vectors: Callable[[], Vectors] | None = None,
    threshold: float | None = None,
    probability: bool = True,
) -> Verdicts:
    """Pairs found by a search (the hits of ``POST /search``, ``dupq dedup``): their cosines ``(N,)``.

    ``vectors`` fetches the pairs' vectors; it is called only when the model has an mlp head and
    the probability is wanted (``probability=False``: only when the verdict compares it)."""
    logits = None
    if _wants_probability(model, probability):
        if needs_vectors(model):
            if vectors is None:
                raise DupqError(NEEDS_VECTORS)
            logits = pair_logits(model, *vectors())
        else:
            logits = model.judge.logits_from_cosines(cosines)
    return _decide(model, cosines, logits, threshold)


def search_tiers(model: Judging, calibration: dict | None = None) -> dict[str, Any]:
    """The thresholds of a search hit's tiers and the score they apply to: ``{"suggest", "duplicate", "on"}``
    (the search calibration's on its probability; without one, both the model's own threshold).
    ``calibration``: a search calibration to use in place of the model's (a collection's own)."""
    calibration = model.judge.search_calibration if calibration is None else calibration
    if calibration is None:
        return {"suggest": model.judge.threshold, "duplicate": model.judge.threshold, "on": model.judge.threshold_on}
    return {"suggest": calibration["suggest"], "duplicate": calibration["duplicate"], "on": PROBABILITY}


def dedup_tiers(model: Judging, threshold: float, on: str) -> dict[str, Any]:
    """The tier thresholds of a pair that ``dupq dedup`` grouped, on the score it judged (``on``: the model's
    ``threshold_on``, or ``similarity`` when the run judged the cosine alone) at the run's ``threshold``.

    A grouped pair has no search margin, so its score is the pair's own: every member passed the run's threshold,
    so that is ``suggest``; ``duplicate`` is the model's search calibration's ``duplicate`` threshold, compared
    with the pair's probability, when the model has one and the run judged the probability (never below the
    run's threshold), else the run's threshold too (one tier, as :func:`search_tiers` without a calibration).

    >>> class M: judge = type("J", (), {"search_calibration": {"suggest": 0.2, "duplicate": 0.6}})
    >>> dedup_tiers(M, 0.45, PROBABILITY), dedup_tiers(M, 0.8, SIMILARITY)["duplicate"]
    ({'suggest': 0.45, 'duplicate': 0.6, 'on': 'probability'}, 0.8)
    """
    calibration = model.judge.search_calibration
    duplicate = threshold
    if calibration is not None and on == PROBABILITY:
        duplicate = max(threshold, float(calibration["duplicate"]))
    return {"suggest": float(threshold), "duplicate": float(duplicate), "on": on}


def for_search(
    model: Judging,
    cosines: np.ndarray,
    margins: np.ndarray,
    vectors: Callable[[], Vectors] | None = None,
    calibration: dict | None = None,
) -> Verdicts:
    """Search hits (the hits of a collection's search): their cosines ``(N,)`` and their margins over the
    best other hit of their search (:func:`search_margins`), judged in tiers.

    With the model's search calibration, the probability is :func:`~dupq.modeling.probability.search_calibrated`
    (held up for identical texts) and a hit is a duplicate in the ``duplicate`` tier; without one, as
    :func:`from_cosines` judges pairs, both tiers at the model's threshold. ``calibration``: a search
    calibration to use in place of the model's (a collection's own, fitted on its moderators' decisions)."""
    calibration = model.judge.search_calibration if calibration is None else calibration
    if calibration is None:
        judged = from_cosines(model, cosines, vectors)
        return replace(judged, tier=np.where(judged.duplicate, DUPLICATE, None))
    similarity = clip_cosines(np.asarray(cosines, dtype=np.float64))
    if needs_vectors(model) and vectors is None:
        raise DupqError(NEEDS_VECTORS)
    logits = pair_logits(model, *vectors()) if needs_vectors(model) else model.judge.logits_from_cosines(similarity)
    probability = held_up(search_calibrated(calibration, logits, similarity, margins), similarity)
    tier = tiers(probability, calibration["suggest"], calibration["duplicate"])
    duplicate = calibration["duplicate"]
    return Verdicts(similarity, probability, probability, tier == DUPLICATE, duplicate, PROBABILITY, tier)


def on_cosines(cosines: np.ndarray, threshold: float) -> Verdicts:
    """Pairs judged by their cosine ``(N,)`` alone at ``threshold``, whatever the model's own rule
    (``dupq dedup --on similarity``, faster: no pair head, no calibration)."""
    similarity = clip_cosines(np.asarray(cosines, dtype=np.float64))
    threshold = float(threshold)
    return Verdicts(similarity, None, similarity, above(similarity, threshold), threshold, SIMILARITY)


def _decide(model: Judging, similarity: np.ndarray, logits: np.ndarray | None, threshold: float | None) -> Verdicts:
    """The rule itself: the calibrated probability of ``logits`` (None without them), the score that
    ``threshold_on`` names, and ``score > threshold`` (the model's threshold unless one is given)."""
    judge = model.judge
    threshold = judge.threshold if threshold is None else float(threshold)
    similarity = clip_cosines(np.asarray(similarity, dtype=np.float64))
    probability = None if logits is None else held_up(calibrated(judge.calibration, logits), similarity)
    if judge.threshold_on == PROBABILITY:
        if probability is None:
            raise DupqError(NO_PROBABILITY)
        score = probability
    else:
        score = similarity
    return Verdicts(similarity, probability, score, above(score, threshold), threshold, judge.threshold_on)


def _wants_probability(model: Judging, asked: bool) -> bool:
    """Whether to compute the probability: the model gives one, and it is asked for or compared by
    the verdict (a model that compares a probability it cannot give is refused in :func:`_decide`)."""
    return has_probability(model) and (asked or model.judge.threshold_on == PROBABILITY)


def _reads_vectors(head: HeadConfig | None) -> bool:
    return head is not None and head.kind == "mlp"
