"""Batch sources and false-negative masks, on small synthetic pairs made here."""

from __future__ import annotations

import numpy as np
import torch

from dupq.data.duplicates import duplicate_groups
from dupq.data.tokenizer import Vocabulary
from dupq.training.batches import PairBatches, false_negatives
from support.kit import make_pairs


def naive_components(texts, edges):
    """Connected components by repeated graph search: the reference for the union-find."""
    neighbours = {t: set() for t in texts}
    for a, b in edges:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    component, label = {}, 0
    for t in texts:
        if t in component:
            continue
        stack = [t]
        while stack:
            x = stack.pop()
            if x not in component:
                component[x] = label
                stack.extend(neighbours.get(x, ()))
        label += 1
    return component


def test_duplicate_groups_are_the_connected_components_of_duplicate_pairs():
    rng = np.random.default_rng(0)
    texts = [f"question {i}" for i in range(60)]
    rows = [(texts[a], texts[b], int(rng.random() < 0.5)) for a, b in rng.integers(0, 60, size=(70, 2))]
    groups = duplicate_groups(texts, [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows]))
    reference = naive_components(texts, [(a, b) for a, b, y in rows if y])
    for s in texts:
        for t in texts:
            assert (groups[s] == groups[t]) == (reference[s] == reference[t])


def test_false_negatives_marks_same_group_cells_off_the_diagonal():
    anchors = torch.tensor([0, 1, 2, 1])
    columns = torch.tensor([0, 1, 5, 1, 2, 0])
    mask = false_negatives(anchors, columns)
    expected = [[anchors[i] == columns[j] and i != j for j in range(6)] for i in range(4)]
    assert mask.tolist() == expected


def test_labelled_batches_cover_every_pair_and_add_hard_negatives_to_duplicate_rows():
    rows = [
        ("how do i cook rice", "how to cook rice", 1),
        ("how do i cook rice", "how do i cook pasta", 0),
        ("what is python", "what is python used for", 0),
        ("how to learn python", "best way to learn python", 1),
        ("how to learn python", "how to learn java", 0),
        ("is tea healthy", "is green tea good for you", 1),
    ]
    pairs = make_pairs(rows)
    vocab = Vocabulary.build(pairs.q1 + pairs.q2)
    texts = list(dict.fromkeys(pairs.q1 + pairs.q2))
    groups = duplicate_groups(texts, pairs.q1, pairs.q2, pairs.labels)
    source = PairBatches(vocab, pairs, batch_size=4, groups=groups, hard_negatives=pairs)
    rng = np.random.default_rng(1)
    seen = np.concatenate(source.epoch(rng))
    assert sorted(seen.tolist()) == list(range(len(rows)))
    batch = source.batch(np.arange(6), rng)
    # Rows 0 and 3 are duplicates with a labelled non-duplicate each; row 5 has none: 2 extra questions.
    assert batch.ids.shape[0] == 2 * 6 + 2 and batch.size == 6
    assert batch.labels.tolist() == [1, 0, 0, 1, 0, 1]
    extra = {tuple(vocab.encode([q])[0].tolist()) for q in ("how do i cook pasta", "how to learn java")}
    assert {tuple(batch.ids[i, : int(batch.lengths[i])].tolist()) for i in (12, 13)} == extra
    # A question and its duplicate share a group; q1 of rows 0 and 1 is the same text.
    g = batch.groups.tolist()
    assert g[0] == g[6] == g[1] and g[3] == g[9] and g[2] != g[8]
