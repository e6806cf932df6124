"""Similarity and the triplet loss with hard negative mining, as functions of embeddings.

Reference: the seed notebooks (000, 001, 003: the maths with worked numbers; 002: the
assignment's ``TripletLossFn``). In a batch, ``v1[i]`` and ``v2[i]`` encode a duplicate pair and
every other pairing is taken as a negative. With the similarity matrix

    S = normalize(v2) @ normalize(v1).T          # (B, B): S[i, j] = cos(v2[i], v1[j])

(rows are anchors, as in the seed assignment, ``scores = v2 v1^T``), for row i:

    s(A,P)      = S[i, i]
    mean_neg    = mean of S[i, j] over j != i
    closest_neg = max of S[i, j] over j != i with S[i, j] <= S[i, i]   (no such j: no term)
    L_i         = max(mean_neg - s(A,P) + a, 0) + max(closest_neg - s(A,P) + a, 0)

and the batch loss is ``sum_i L_i`` (the seed) or its mean. Extra negatives (questions known not
to duplicate any row) can be appended as columns: ``S`` becomes ``(B, B + M)``.
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


def _negative_mask(scores: Tensor) -> Tensor:
    """True where ``scores[i, j]`` is a negative, i.e. off the diagonal ``j == i``."""
    n_rows, n_cols = scores.shape
    cols = torch.arange(n_cols, device=scores.device)
    return cols[None, :] != torch.arange(n_rows, device=scores.device)[:, None]  # (B, C)


def mean_negative(scores: Tensor) -> Tensor:
    """Mean of each row's negatives: ``(sum_j S[i, j] - S[i, i]) / (C - 1)``, shape ``(B,)``."""
    n_cols = scores.shape[1]
    return (scores.sum(dim=1) - scores.diagonal()) / (n_cols - 1)


def closest_negative(scores: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's hardest negative that still scores at most its positive.

    Returns ``(values, found)``, both ``(B,)``: ``values[i] = max{S[i, j] : j != i,
    S[i, j] <= S[i, i]}`` where ``found[i]``, and 0 where row i has no such negative (the seeds
    mask those rows so that they add no closest-negative term; callers must do the same).
    """
    positive = scores.diagonal()  # (B,)
    candidate = _negative_mask(scores) & (scores <= positive[:, None])  # (B, C)
    best = scores.masked_fill(~candidate, float("-inf")).max(dim=1).values  # (B,)
    found = candidate.any(dim=1)
    return torch.where(found, best, torch.zeros_like(best)), found


def triplet_loss_from_scores(scores: Tensor, margin: float = 0.25, reduction: str = "sum") -> Tensor:
    """Triplet loss with hard negative mining on a similarity matrix whose diagonal holds the positives.

    ``L_i = relu(mean_neg_i - S[i,i] + margin) + [found_i] relu(closest_neg_i - S[i,i] + margin)``,
    summed (``reduction="sum"``, the seed) or averaged (``"mean"``) over the rows.
    """
    if scores.shape[1] < 2:
        raise ValueError("the triplet loss needs at least one negative per row (a batch of 2 or more).")
    positive = scores.diagonal()  # (B,)
    l_mean = F.relu(mean_negative(scores) - positive + margin)  # (B,)
    closest, found = closest_negative(scores)
    l_closest = torch.where(found, F.relu(closest - positive + margin), torch.zeros_like(positive))
    per_row = l_mean + l_closest  # (B,)
    if reduction == "sum":
        return per_row.sum()
    if reduction == "mean":
        return per_row.mean()
    raise ValueError(f"reduction must be 'sum' or 'mean', not {reduction!r}.")


def triplet_loss(
    v1: Tensor,
    v2: Tensor,
    margin: float = 0.25,
    reduction: str = "sum",
    symmetric: bool = False,
    negatives: Tensor | None = None,
) -> Tensor:
    """Triplet loss with hard negative mining for a batch of duplicate pairs ``(v1[i], v2[i])``.

    Args:
        v1, v2: ``(B, D)`` embeddings of the two sides of B duplicate pairs (any norm).
        margin: the seed's alpha; how far below a positive each negative must stay.
        reduction: ``"sum"`` over the batch (the seed) or ``"mean"``.
        symmetric: also take ``v1`` rows as anchors against ``v2`` columns and average the two.
        negatives: optional ``(M, D)`` embeddings of questions known to duplicate no row,
            appended as M extra negative columns.

    >>> v1 = torch.tensor([[0.26726124, 0.53452248, 0.80178373], [0.5178918, 0.57543534, 0.63297887]])
    >>> v2 = torch.tensor([[0.26726124, 0.53452248, 0.80178373], [-0.5178918, -0.57543534, -0.63297887]])
    >>> round(triplet_loss(v1, v2).item(), 4)   # seed 002's worked example
    0.7035
    """
    extra = [] if negatives is None else [negatives]
    loss = triplet_loss_from_scores(similarity_matrix(v2, torch.cat([v1, *extra])), margin, reduction)
    if symmetric:
        other = triplet_loss_from_scores(similarity_matrix(v1, torch.cat([v2, *extra])), margin, reduction)
        loss = (loss + other) / 2
    return loss
