"""Similarity and the triplet loss with hard negative mining, as functions of embeddings.

The triplet loss is the seed recipe's: in a batch, ``v1[i]`` and ``v2[i]`` encode a duplicate
pair and every other pairing is taken as a negative. With the similarity matrix

    S = normalize(v2) @ normalize(v1).T          # (B, B): S[i, j] = cos(v2[i], v1[j])

(rows are anchors: ``scores = v2 v1^T``), for row i:

    s(A,P)      = S[i, i]
    mean_neg    = mean of S[i, j] over j != i
    closest_neg = max of S[i, j] over j != i with S[i, j] <= S[i, i]   (no such j: no term)
    L_i         = max(mean_neg - s(A,P) + a, 0) + max(closest_neg - s(A,P) + a, 0)

and the batch loss is ``sum_i L_i`` (the seed recipe) or its mean. Extra negatives (questions known not
to duplicate any row) can be appended as columns: ``S`` becomes ``(B, B + M)``. A boolean
``excluded`` matrix of the same shape removes cells that are not true negatives (the anchor's own
text again, or a known duplicate of it) from both the mean and the closest negative.

Beyond the seed, the losses that learn from *labelled* pairs (both labels) and the ranking loss
of sentence-transformers are here too, each a function of embeddings:

* :func:`multiple_negatives_ranking_loss`: softmax cross-entropy over in-batch candidates;
* :func:`pair_bce_loss`: binary cross-entropy on a pair logit (a scaled cosine or a pair head).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_similarity(a: Tensor, b: Tensor) -> Tensor:
    """Cosine of the angle between ``a`` and ``b`` along the last axis: ``a.b / (|a| |b|)``.

    Works for two vectors ``(D,)`` (a scalar) or two batches ``(N, D)`` (``(N,)``, row by row).

    >>> cosine_similarity(torch.tensor([1., 2, 3]), torch.tensor([1., 2, 3.5])).item()  # doctest: +ELLIPSIS
    0.997...
    """
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def similarity_matrix(a: Tensor, b: Tensor) -> Tensor:
    """All pairwise cosines ``S[i, j] = cos(a[i], b[j])`` as a product of L2-normalised rows.

    ``a`` is ``(N, D)``, ``b`` is ``(M, D)``; the result is ``(N, M)``.
    """
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T  # (N, M)


def _negative_mask(scores: Tensor, excluded: Tensor | None = None) -> Tensor:
    """True where ``scores[i, j]`` is a negative: off the diagonal ``j == i`` and not ``excluded``."""
    n_rows, n_cols = scores.shape
    cols = torch.arange(n_cols, device=scores.device)
    negative = cols[None, :] != torch.arange(n_rows, device=scores.device)[:, None]  # (B, C)
    return negative if excluded is None else negative & ~excluded


def mean_negative(scores: Tensor, excluded: Tensor | None = None) -> Tensor:
    """Mean of each row's negatives: ``(sum_j S[i, j] - S[i, i]) / (C - 1)``, shape ``(B,)``.

    With ``excluded`` (``(B, C)`` bool), the mean runs over the remaining off-diagonal cells only
    (a row left with none gets 0).
    """
    if excluded is None:
        n_cols = scores.shape[1]
        return (scores.sum(dim=1) - scores.diagonal()) / (n_cols - 1)
    negative = _negative_mask(scores, excluded)  # (B, C)
    return (scores * negative).sum(dim=1) / negative.sum(dim=1).clamp(min=1)


def closest_negative(scores: Tensor, excluded: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Each row's hardest negative that still scores at most its positive.

    Returns ``(values, found)``, both ``(B,)``: ``values[i] = max{S[i, j] : j != i,
    S[i, j] <= S[i, i]}`` where ``found[i]``, and 0 where row i has no such negative (the seeds
    mask those rows so that they add no closest-negative term; callers must do the same).
    """
    positive = scores.diagonal()  # (B,)
    candidate = _negative_mask(scores, excluded) & (scores <= positive[:, None])  # (B, C)
    best = scores.masked_fill(~candidate, float("-inf")).max(dim=1).values  # (B,)
    found = candidate.any(dim=1)
    return torch.where(found, best, torch.zeros_like(best)), found


def _reduce(per_row: Tensor, reduction: str) -> Tensor:
    if reduction == "sum":
        return per_row.sum()
    if reduction == "mean":
        return per_row.mean()
    raise ValueError(f"reduction must be 'sum' or 'mean', not {reduction!r}.")


def triplet_loss_from_scores(
    scores: Tensor, margin: float = 0.25, reduction: str = "sum", excluded: Tensor | None = None
) -> Tensor:
    """Triplet loss with hard negative mining on a similarity matrix whose diagonal holds the positives.

    ``L_i = relu(mean_neg_i - S[i,i] + margin) + [found_i] relu(closest_neg_i - S[i,i] + margin)``,
    summed (``reduction="sum"``, the seed) or averaged (``"mean"``) over the rows. ``excluded``
    (``(B, C)`` bool) marks cells that are not negatives (false negatives of the batch).
    """
    if scores.shape[1] < 2:
        raise ValueError("the triplet loss needs at least one negative per row (a batch of 2 or more).")
    positive = scores.diagonal()  # (B,)
    l_mean = F.relu(mean_negative(scores, excluded) - positive + margin)  # (B,)
    if excluded is not None:  # a row with no negative left adds nothing
        l_mean = torch.where(_negative_mask(scores, excluded).any(dim=1), l_mean, torch.zeros_like(l_mean))
    closest, found = closest_negative(scores, excluded)
    l_closest = torch.where(found, F.relu(closest - positive + margin), torch.zeros_like(positive))
    return _reduce(l_mean + l_closest, reduction)  # (B,) rows reduced


def triplet_loss(
    v1: Tensor,
    v2: Tensor,
    margin: float = 0.25,
    reduction: str = "sum",
    symmetric: bool = False,
    negatives: Tensor | None = None,
    excluded: Tensor | None = None,
) -> Tensor:
    """Triplet loss with hard negative mining for a batch of duplicate pairs ``(v1[i], v2[i])``.

    Args:
        v1, v2: ``(B, D)`` embeddings of the two sides of B duplicate pairs (any norm).
        margin: the seed's alpha; how far below a positive each negative must stay.
        reduction: ``"sum"`` over the batch (the seed) or ``"mean"``.
        symmetric: also take ``v1`` rows as anchors against ``v2`` columns and average the two.
        negatives: optional ``(M, D)`` embeddings of questions known to duplicate no row,
            appended as M extra negative columns.
        excluded: optional ``(B, B + M)`` bool, True where column j is no negative of row i
            (the same question, or a known duplicate); used for both directions.

    >>> v1 = torch.tensor([[0.26726124, 0.53452248, 0.80178373], [0.5178918, 0.57543534, 0.63297887]])
    >>> v2 = torch.tensor([[0.26726124, 0.53452248, 0.80178373], [-0.5178918, -0.57543534, -0.63297887]])
    >>> round(triplet_loss(v1, v2).item(), 4)   # one identical pair, one opposite: worked by hand
    0.7035
    """
    extra = [] if negatives is None else [negatives]
    loss = triplet_loss_from_scores(similarity_matrix(v2, torch.cat([v1, *extra])), margin, reduction, excluded)
    if symmetric:
        other = triplet_loss_from_scores(similarity_matrix(v1, torch.cat([v2, *extra])), margin, reduction, excluded)
        loss = (loss + other) / 2
    return loss


def multiple_negatives_ranking_loss(
    anchors: Tensor,
    positives: Tensor,
    negatives: Tensor | None = None,
    scale: float = 20.0,
    excluded: Tensor | None = None,
    symmetric: bool = True,
) -> Tensor:
    """Softmax cross-entropy of each anchor over its positive and every other candidate of the batch.

    ``L_i = -log softmax_j(scale * cos(a_i, c_j))[i]`` with candidates ``c = [positives; negatives]`` (``(B + M, D)``);
    column i is row i's positive. This is the "multiple negatives ranking loss" of Henderson et al. 2017 (*Efficient
    Natural Language Response Suggestion for Smart Reply*, arXiv:1705.00652), as sentence-transformers'
    ``MultipleNegativesRankingLoss`` computes it, with (anchor, positive, hard negative) triples when ``negatives``
    holds one labelled non-duplicate per anchor. ``symmetric`` adds the reverse direction (each positive picks its
    anchor among all anchors), averaged, as in ``MultipleNegativesSymmetricRankingLoss``. ``excluded`` (``(B, B + M)``
    bool) removes cells that are false negatives (same text, known duplicate) from the softmax. Returns the mean over
    anchors.

    >>> v = torch.eye(3)
    >>> round(multiple_negatives_ranking_loss(v, v, scale=1.0, symmetric=False).item(), 4)
    0.5514
    """
    candidates = positives if negatives is None else torch.cat([positives, negatives])
    logits = scale * similarity_matrix(anchors, candidates)  # (B, B + M)
    if excluded is not None:
        logits = logits.masked_fill(excluded, float("-inf"))
    target = torch.arange(len(anchors), device=anchors.device)
    loss = F.cross_entropy(logits, target)
    if symmetric:
        back = logits[:, : len(anchors)].T  # (B, B): positive i over every anchor
        loss = (loss + F.cross_entropy(back, target)) / 2
    return loss


def pair_bce_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Binary cross-entropy of pair logits against 0/1 labels, mean over pairs.

    The logit is ``scale * (cos - bias)`` with a learned scale and bias (a logistic regression on
    the cosine, as in Reimers & Gurevych 2019's classification objective reduced to one feature),
    or the output of a pair head over ``[|u - v|, u * v]`` (Conneau et al. 2017, *InferSent*;
    Mou et al. 2016). ``sigmoid(logit)`` is then the probability of a duplicate.

    >>> round(pair_bce_loss(torch.tensor([0.0, 2.0]), torch.tensor([1, 1])).item(), 4)
    0.41
    """
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def distillation_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean cosine distance between student vectors and the teacher's, row by row: ``mean_i 1 - cos(s_i, t_i)``.

    The student (the LSTM's vector, through a learned projection when the widths differ) learns to point where a
    pretrained sentence encoder points. Reimers & Gurevych 2020 (*Making Monolingual Sentence Embeddings Multilingual
    using Knowledge Distillation*, sentence-transformers' ``MSELoss``) and Tang et al. 2019 (*Distilling Task-Specific
    Knowledge from BERT into Simple Neural Networks*) match the teacher's outputs with a squared error; on unit vectors
    ``|s - t|^2 = 2 (1 - cos)``, so this is their loss up to a factor of 2 once ``s`` is normalised, and it ignores the
    student's length, which dupq's encoder normalises away anyway.

    >>> round(distillation_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])).item(), 4)
    1.0
    """
    return (1 - cosine_similarity(student, teacher)).mean()
