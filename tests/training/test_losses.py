"""The similarity and loss maths against numbers worked out by hand and a naive per-triplet loop.

The worked numbers are those the seed recipe's triplet loss was first specified with: cosines of
a few small vectors, two 4 x 3 batches and their similarity matrices, and a hand-made 4 x 4
similarity matrix whose mean negatives, closest negatives and cost are easy to check on paper.
"""

from __future__ import annotations

import math

import pytest
import torch

from dupq.training.losses import (
    closest_negative,
    cosine_similarity,
    distillation_loss,
    mean_negative,
    multiple_negatives_ranking_loss,
    pair_bce_loss,
    similarity_matrix,
    triplet_loss,
    triplet_loss_from_scores,
)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# A hand-made similarity matrix: rows are anchors, the diagonal holds the positives.
HANDMADE = t([[0.9, -0.8, 0.3, -0.5], [-0.4, 0.5, 0.1, -0.1], [0.3, 0.1, -0.4, -0.8], [-0.5, -0.2, -0.7, 0.5]])
SEED_V1 = t([[1, 2, 3], [9, 8, 7], [-1, -4, -2], [1, -7, 2]])


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([1, 2, 3.3, 4], [1.5, 2, 3, 4], 0.9946662395953002),
        ([1, 2, 3.3, 4], [1.5, 2, 3, -4], -0.01900636126615228),
        ([1, 2, 3.3, 4], [-1.5, -2, -3, -4], -0.9946662395953002),
        ([1, 2, 3], [1, 2, 3.5], 0.9974),  # worked to 4 places
        ([1, 2, 3], [1, 2, 3], 1.0),
        ([1, 2, 3], [-1, -2, -3], -1.0),
        ([1, 2, 3], [0, -42, 1], -0.5153),
    ],
)
def test_cosine_similarity_matches_worked_values(a, b, expected):
    assert cosine_similarity(t(a), t(b)).item() == pytest.approx(expected, abs=5e-5)


# The seed's worked batches: (v1, v2), their similarity matrix, and the first one's triplet cost.
WORKED = [
    (
        SEED_V1,
        t([[1.27551159, 2.11854853, 3.01429143], [8.83539979, 8.44302619, 8.21303737],
           [-1.95506567, -2.96172592, -1.76136987], [1.45513761, -8.12660221, 2.14513688]]),
        t([[0.99775671, 0.91410053, -0.88792603, -0.2620184], [0.9120366, 0.99741214, -0.97166368, -0.31058779],
           [-0.88310492, -0.87489687, 0.95423322, 0.68461153], [-0.26267255, -0.31274986, 0.52395375, 0.99919068]]),
        0.33096828036929316,
    ),
    (
        t([[-2.92852677, 1.60778267, 3.41559857], [6.15808817, 7.36827865, 5.78058324],
           [-3.76842578, -2.95374122, -1.0572413], [-0.81672465, -6.6080942, 3.82946569]]),
        SEED_V1,
        t([[0.58924083, 0.15650085, -0.47197698, -0.20939565], [0.91173463, 0.99178717, -0.91879297, -0.41108239],
           [-0.70026323, -0.95094808, 0.78761446, 0.41055358], [-0.08853597, -0.312278, 0.55655378, 0.94073422]]),
        None,
    ),
]  # fmt: skip


@pytest.mark.parametrize("v1, v2, expected, cost", WORKED, ids=["first", "second"])
def test_similarity_matrix_and_triplet_cost_match_the_worked_batches(v1, v2, expected, cost):
    scores = similarity_matrix(v1, v2)
    assert torch.allclose(scores, expected, atol=1e-7)
    if cost is not None:
        assert triplet_loss_from_scores(scores).item() == pytest.approx(cost, abs=1e-6)


def test_mean_and_closest_negative_of_the_handmade_matrix():
    assert torch.allclose(mean_negative(HANDMADE), t([-1 / 3, -0.4 / 3, -0.4 / 3, -1.4 / 3]))
    values, found = closest_negative(HANDMADE)
    assert torch.allclose(values, t([0.3, 0.1, -0.8, -0.2]))
    assert found.all()


def test_loss_on_handmade_matrix_is_its_worked_cost():
    # 0.517 by hand. Broadcasting the (4,) positives against (4, 1) negatives instead of (4,) gives
    # 3.783 for the same matrix: a shape bug this value would catch.
    assert triplet_loss_from_scores(HANDMADE).item() == pytest.approx(0.51666667, abs=1e-7)


def test_triplet_loss_matches_the_worked_example():
    v1 = t([[0.26726124, 0.53452248, 0.80178373], [0.5178918, 0.57543534, 0.63297887]])
    v2 = t([[0.26726124, 0.53452248, 0.80178373], [-0.5178918, -0.57543534, -0.63297887]])
    assert triplet_loss(v1, v2).item() == pytest.approx(0.703507682515891, abs=1e-7)


def test_row_without_a_lower_negative_adds_no_closest_term():
    scores = t([[-0.9, 0.2], [0.1, 0.8]])  # row 0: its only negative (0.2) is above its positive
    values, found = closest_negative(scores)
    assert found.tolist() == [False, True]
    # Row 0 contributes only its mean term: relu(0.2 + 0.9 + 0.25) = 1.35; row 1: relu(0.1 - 0.8 + .25) twice = 0.
    assert triplet_loss_from_scores(scores).item() == pytest.approx(1.35)


def _cos(a, b):
    a, b = list(map(float, a)), list(map(float, b))
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _random(n, d, seed, count=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(count)]


def naive_loss(v1, v2, margin=0.25, reduction="sum", negatives=None, excluded=None):
    """Per-triplet Python loop over rows (anchors v2[i]) and columns (v1 then extra negatives); the excluded
    columns of a row are no negatives of it, and a row left without one adds nothing."""
    columns = list(v1) + (list(negatives) if negatives is not None else [])
    rows = []
    for i, anchor in enumerate(v2):
        positive = _cos(anchor, columns[i])
        negs = [_cos(anchor, c) for j, c in enumerate(columns) if j != i and not (excluded and excluded[i][j])]
        if not negs:
            continue
        loss = max(sum(negs) / len(negs) - positive + margin, 0.0)
        below = [n for n in negs if n <= positive]
        if below:
            loss += max(max(below) - positive + margin, 0.0)
        rows.append(loss)
    return sum(rows) if reduction == "sum" else sum(rows) / len(rows)


@pytest.mark.parametrize("batch", [2, 3, 8, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_triplet_loss_matches_naive_loop(batch, dtype, reduction):
    g = torch.Generator().manual_seed(batch)
    v1 = torch.randn(batch, 5, generator=g, dtype=dtype)
    v2 = v1 + 0.8 * torch.randn(batch, 5, generator=g, dtype=dtype)  # noisy duplicates: mixed easy/hard rows
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    got = triplet_loss(v1, v2, margin=0.25, reduction=reduction).item()
    assert got == pytest.approx(naive_loss(v1, v2, 0.25, reduction), rel=tol, abs=tol)


def test_symmetric_loss_and_extra_negatives_match_naive_loop():
    v1, v2, neg = _random(6, 4, 7, 3)
    got = triplet_loss(v1, v2, reduction="sum", symmetric=True, negatives=neg).item()
    expected = (naive_loss(v1, v2, negatives=neg) + naive_loss(v2, v1, negatives=neg)) / 2
    assert got == pytest.approx(expected, rel=1e-10)


def test_loss_rejects_a_batch_without_negatives():
    with pytest.raises(ValueError):
        triplet_loss(torch.ones(1, 3), torch.ones(1, 3))
    with pytest.raises(ValueError):
        triplet_loss(torch.ones(2, 3), torch.ones(2, 3), reduction="max")


# The losses that learn from labelled pairs, each against a plain Python loop.


def test_triplet_loss_with_excluded_columns_matches_naive_loop():
    v1, v2 = _random(7, 4, 11)
    excluded = torch.zeros(7, 7, dtype=torch.bool)
    excluded[0, 3] = excluded[3, 0] = excluded[2, 5] = True
    excluded[6, :6] = True  # row 6 has no negative left: it adds nothing
    got = triplet_loss(v1, v2, reduction="sum", excluded=excluded).item()
    assert got == pytest.approx(naive_loss(v1, v2, excluded=excluded.tolist()), rel=1e-10)
    assert got != pytest.approx(triplet_loss(v1, v2, reduction="sum").item(), rel=1e-6)  # the mask matters


def naive_ranking(anchors, candidates, scale, excluded=None):
    total = 0.0
    for i, a in enumerate(anchors):
        logits = [scale * _cos(a, c) for j, c in enumerate(candidates) if excluded is None or not excluded[i][j]]
        own = scale * _cos(a, candidates[i])
        total += -(own - math.log(sum(math.exp(x) for x in logits)))
    return total / len(anchors)


@pytest.mark.parametrize("symmetric", [False, True])
def test_ranking_loss_matches_naive_loop(symmetric):
    a, p, n = _random(5, 6, 21, 3)
    excluded = torch.zeros(5, 8, dtype=torch.bool)
    excluded[1, 4] = excluded[2, 6] = True
    got = multiple_negatives_ranking_loss(a, p, n[:3], scale=7.0, excluded=excluded, symmetric=symmetric).item()
    candidates = torch.cat([p, n[:3]])
    expected = naive_ranking(a, candidates, 7.0, excluded.tolist())
    if symmetric:  # positive i picks its anchor among all anchors, with the same cells excluded
        expected = (expected + naive_ranking(p, a, 7.0, excluded[:, :5].T.tolist())) / 2
    assert got == pytest.approx(expected, rel=1e-10)


def test_pair_bce_matches_formula():
    logits, labels = [-3.0, -0.2, 0.0, 1.5, 4.0], [0, 1, 0, 1, 1]
    p = [1 / (1 + math.exp(-x)) for x in logits]
    naive = -sum(math.log(q if y else 1 - q) for q, y in zip(p, labels)) / 5
    got = pair_bce_loss(torch.tensor(logits, dtype=torch.float64), torch.tensor(labels)).item()
    assert got == pytest.approx(naive, rel=1e-12)


# The distillation losses: student vectors against a teacher's, different widths allowed for the matrix.


def test_distillation_loss_matches_naive_loop():
    student, teacher = _random(6, 5, 21)
    expected = sum(1 - _cos(s, t) for s, t in zip(student, teacher)) / len(student)
    assert distillation_loss(student, teacher).item() == pytest.approx(expected, abs=1e-12)
    # a perfect student costs nothing
    assert distillation_loss(teacher, teacher).item() == pytest.approx(0.0, abs=1e-12)


_EXCLUDED = torch.zeros(5, 10, dtype=torch.bool)
_EXCLUDED[0, 2] = True
_LABELS = torch.tensor([1, 0] * 6)


@pytest.mark.parametrize(
    "loss, shapes",
    [
        (lambda a, b, n: triplet_loss(a, b, negatives=n, symmetric=True), [(6, 4), (6, 4), (3, 4)]),
        (lambda a, p, n: multiple_negatives_ranking_loss(a, p, n, 5.0, _EXCLUDED), [(5, 4)] * 3),
        (lambda logits: pair_bce_loss(logits, _LABELS), [(12,)]),
        (lambda s, t: distillation_loss(s, t), [(4, 3), (4, 3)]),
    ],
    ids=["triplet", "ranking", "bce", "distil"],
)
def test_each_loss_has_the_gradient_of_its_formula(loss, shapes):
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True) for shape in shapes]
    assert torch.autograd.gradcheck(loss, inputs)
