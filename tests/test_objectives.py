"""Objectives point the losses at the right rows: checked against the losses called by hand."""

from __future__ import annotations

import pytest
import torch

from dupq.modeling.heads import HeadConfig, PairHead
from dupq.training.batches import Batch
from dupq.training.losses import multiple_negatives_ranking_loss, pair_bce_loss, triplet_loss
from dupq.training.objectives import Objective, parse_losses


def _batch(labels, groups, extra=0, dim=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(labels)
    v = torch.nn.functional.normalize(torch.randn(2 * b + extra, dim, generator=g, dtype=torch.float64), dim=-1)
    batch = Batch(
        torch.zeros(2 * b + extra, 1, dtype=torch.long),
        torch.ones(2 * b + extra, dtype=torch.long),
        torch.tensor(labels, dtype=torch.float32),
        torch.tensor(groups),
        b,
    )
    return v, batch


def test_seed_objective_is_the_seed_triplet_loss_on_the_whole_batch():
    v, batch = _batch([1, 1, 1, 1], list(range(8)))
    assert Objective({"triplet": 1.0})(v, batch).item() == pytest.approx(triplet_loss(v[:4], v[4:]).item(), rel=1e-12)


def test_labelled_objective_ranks_duplicate_rows_against_every_other_question_and_masks_their_group():
    labels = [1, 0, 1, 0, 1]
    # Row 0's q1 has the same group as row 3's q2 (the same text), which must not be its negative.
    groups = [10, 11, 12, 13, 14, 10, 21, 12, 10, 14, 30]
    v, batch = _batch(labels, groups, extra=1)
    head = PairHead(HeadConfig("cosine", 5)).double()
    objective = Objective({"ranking": 0.5, "bce": 2.0}, mask_false_negatives=True)
    got = objective(v, batch, head).item()
    v1, v2, extra = v[:5], v[5:10], v[10:]
    dup, other = [0, 2, 4], [1, 3]
    candidates = torch.cat([v1[dup], v1[other], v2[other], extra])  # (6, d): positives first
    column_groups = [10, 12, 14, 11, 13, 21, 10, 30]
    excluded = torch.tensor(
        [[column_groups[j] in (groups[r], groups[5 + r]) and j != i for j in range(8)] for i, r in enumerate(dup)]
    )
    assert excluded.any()  # the mask is exercised
    ranking = multiple_negatives_ranking_loss(v2[dup], v1[dup], candidates[3:], 20.0, excluded)
    bce = pair_bce_loss(head(v1, v2), batch.labels)
    assert got == pytest.approx(0.5 * ranking.item() + 2.0 * bce.item(), rel=1e-9)


def test_parse_losses_reads_weights_and_refuses_bad_ones():
    assert parse_losses(["bce", "ranking:0.5"]) == {"bce": 1.0, "ranking": 0.5}
    for bad in (["hinge"], ["bce:x"], ["bce:-1"], ["bce:inf"], []):
        with pytest.raises(ValueError):
            parse_losses(bad)
